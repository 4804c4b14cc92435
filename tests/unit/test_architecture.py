"""The layout of the code as docs/architecture.md draws it, kept true by tests.

Subpackages stand in layers and import only downwards: the command line and the store on
top, then running jobs, the job folder, planning, the batch check, and at the ground the
typed models and small helpers every layer shares. No module imports itself back through
another. Each module has one job, named in one line of docs/architecture.md: every module
is listed there, under its folder's heading. There is no cap on lines: a module is as long
as its one job needs, and a second job is a second module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from core.config import REPO_ROOT

CORE = REPO_ROOT / "core"
UI = REPO_ROOT / "ui"
# Lower numbers are lower layers; a module may import its own layer or lower ones.
LAYERS = {
    "config": 0,
    "schemas": 0,
    "files": 0,
    "endpoints": 0,  # the one table of endpoints
    "json_strict": 0,
    "devices": 0,
    "nvml": 0,  # GPU readings, importing nothing else (bench/gpu_readings.py)
    "model_folders": 0,
    "model_names": 0,  # body.model -> model folder, kept in the data folder
    "adapters": 0,  # LoRA adapter folders, checked against their base
    "access": 0,
    "recent": 0,
    "row_table": 0,  # rows found by a value of theirs, no object per row
    "storage": 0,  # object storage in and out (s3://)
    "core": 0,  # core/__init__.py: the version
    "check": 1,
    "webhooks": 1,  # job-end events: endpoints, signing, the outbox (below jobs/, which records)
    "human": 1,  # people's work on disk (labels, preferences, samples)
    "plan": 2,
    "jobs": 3,
    "run": 4,
    "reuse": 4,  # answers already made (core/reuse): the worker's, beside run/
    "store": 5,
    "qa": 6,
    "experiments": 6,  # prompts x models x settings as one job, graded (beside qa/)
    "api": 6,  # the Batch API: jobs and their files in OpenAI's shapes
    "cli": 7,
    "__main__": 8,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    path = REPO_ROOT / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imports() -> dict[str, set[str]]:
    """Every core module and the core modules it imports (lazy imports included)."""
    graph: dict[str, set[str]] = {}
    for path in CORE.rglob("*.py"):
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("core"):
                found.add(node.module)
                found.update(
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if is_module(f"{node.module}.{a.name}")
                )
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("core"))
        graph[module_name(path)] = found
    return graph


def layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "core"]


def test_every_import_runs_down_the_layers():
    upward = [
        f"{module} -> {target}"
        for module, targets in imports().items()
        for target in targets
        if layer(target) > layer(module)
    ]
    assert upward == []


def test_no_module_imports_itself_back_through_others():
    graph = imports()
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        for target in graph.get(module, ()):
            if target in path:
                cycles.append([*path[path.index(target) :], target])
            elif target in graph and target not in done:
                visit(target, [*path, target])
        done.add(module)

    done: set[str] = set()
    for module in graph:
        visit(module, [module])
    assert cycles == []


def listed_modules() -> dict[str, set[str]]:
    """docs/architecture.md's modules, per folder heading (``### `core/run/` — ...``)."""
    listed: dict[str, set[str]] = {}
    folder = None
    for line in (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            heading = re.match(r"### `([\w/]+)/`", line)
            folder = heading.group(1) if heading else "." if "top level" in line else None
        elif line.startswith("## "):
            folder = None
        elif folder is not None and (item := re.match(r"- `(\w+\.py)` — \S", line)):
            listed.setdefault(folder, set()).add(item.group(1))
    return listed


def test_every_module_is_listed_once_in_the_architecture_doc():
    """A newcomer finds every module, and what it is for, in one place."""
    folders = {".": REPO_ROOT, "pages": REPO_ROOT / "pages", "ui": UI, "core": CORE}
    folders.update({f"core/{p.name}": p for p in CORE.iterdir() if (p / "__init__.py").is_file()})
    present = {
        name: {p.name for p in path.glob("*.py") if p.name != "__init__.py"}
        for name, path in folders.items()
    }
    listed = listed_modules()
    files = {f"{d}/{f}" for d, names in present.items() for f in names}
    entries = {f"{d}/{f}" for d, names in listed.items() for f in names}
    assert sorted(files - entries) == [], "missing from docs/architecture.md"
    assert sorted(entries - files) == [], "listed in docs/architecture.md, not in the code"


def test_pages_holds_the_apps_pages_and_nothing_else():
    """Every file of pages/ is one of the app's pages (ui/navigation.py, which app.py
    runs); what pages share lives in ui/."""
    app = (REPO_ROOT / "ui" / "navigation.py").read_text(encoding="utf-8")
    named = set(re.findall(r'st\.Page\(\s*"pages/(\w+\.py)"', app))
    assert named, "the app names no page"
    assert {p.name for p in (REPO_ROOT / "pages").glob("*.py")} == named


# A page's script, below its functions: the sections it draws, in order, and little else.
PAGE_SCRIPT_STATEMENTS = 12


def _script_statements(tree: ast.Module) -> int:
    """Statements a page runs at its top level outside its functions (an ``if`` with all
    it holds), its docstring, imports and UPPER_CASE constants aside."""

    def constant(node: ast.stmt) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        return bool(targets) and all(isinstance(t, ast.Name) and t.id.isupper() for t in targets)

    count = 0
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom) or constant(node):
            continue
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        count += sum(
            isinstance(inner, ast.stmt)
            and not isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            for inner in ast.walk(node)
        )
    return count


def test_each_page_reads_as_its_named_sections():
    """A page is widgets over core/, in functions named for what they draw: its top level
    is a short script calling them, not hundreds of statements (issue 39)."""
    long_scripts = {}
    for path in sorted((REPO_ROOT / "pages").glob("*.py")):
        count = _script_statements(ast.parse(path.read_text(encoding="utf-8")))
        if count > PAGE_SCRIPT_STATEMENTS:
            long_scripts[path.name] = count
    assert long_scripts == {}, f"top-level statements beyond {PAGE_SCRIPT_STATEMENTS}"


def test_the_ui_runs_above_core_and_pages_above_ui():
    """core/ never imports the UI (the worker and the command line run without Streamlit's
    pages), and ui/ never imports a page."""
    upward = []
    for folder, above in ((CORE, ("ui", "pages")), (UI, ("pages",))):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                upward += [f"{path.name} -> {n}" for n in names if n.split(".")[0] in above]
    assert upward == []


def test_pages_and_ui_hold_widgets_and_reach_the_store_only_through_public_methods():
    for path in [*(REPO_ROOT / "pages").glob("*.py"), *UI.glob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                assert node.attr.startswith("__"), f"{path.name} reaches into {node.attr}"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
                assert not {"duckdb", "subprocess"} & set(names), f"{path.name} imports {names}"


def test_one_atomic_write_and_one_retry_policy():
    """Files and folders are replaced atomically by core/files.py alone (a temporary beside
    the target, renamed over it), and engine faults are retried by core/run/retry.py
    alone."""
    replacing, retrying = [], []
    signs = ("mkstemp", ".tmp", ".partial", "os.replace(", "os.rename(")
    for path in CORE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(REPO_ROOT))
        if any(sign in text for sign in signs):
            replacing.append(name)
        if "BACKOFF" in text:
            retrying.append(name)
    assert replacing == ["core/files.py"]
    assert retrying == ["core/run/retry.py"]


TESTS = REPO_ROOT / "tests"
TEST_KINDS = ("unit", "pages", "engine", "browser", "ray")  # docs/tests.md


def imported_test_modules(path: Path) -> list[str]:
    """The test modules (``test_*.py``) that ``path`` imports, lazy imports included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names = [base] + [f"{base}.{alias.name}".lstrip(".") for alias in node.names]
        else:
            continue
        found += [n for n in names if n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_imports_another():
    """What tests share lives in tests/support/ or a conftest.py, so a test module can be
    moved, split or run alone without another one coming along."""
    imports = {
        str(path.relative_to(REPO_ROOT)): imported
        for path in sorted(TESTS.rglob("*.py"))
        if (imported := imported_test_modules(path))
    }
    assert not imports, imports


def test_the_fast_tier_collects_without_importing_vllm_or_torch():
    """Importing vllm (and torch) costs a pytest process about 5 s: at collection every
    xdist worker of `make check` would pay it. A unit or page test that needs vLLM's
    models imports them inside the test (tests/support/conformance.py's helpers do)."""
    collected = [TESTS / "conftest.py", *TESTS.glob("support/*.py")]
    collected += [*TESTS.glob("unit/*.py"), *TESTS.glob("pages/*.py")]
    heavy = {
        str(path.relative_to(REPO_ROOT))
        for path in collected
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(
            name.split(".")[0] in ("vllm", "torch")
            for name in (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
        )
    }
    assert not heavy, heavy


def test_every_test_module_lives_in_its_kinds_folder():
    """The folder is the kind (tests/conftest.py marks and checks by it): no test module
    outside tests/unit, pages, engine, browser and ray."""
    outside = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.parent.parent != TESTS or path.parent.name not in TEST_KINDS
    ]
    assert not outside, outside


def starts_ray(path: Path) -> bool:
    """Whether ``path`` calls ``ray.init`` or imports ``ray.cluster_utils`` (a cluster)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "ray.cluster_utils":
            return True
        if isinstance(node, ast.Import) and any(a.name == "ray.cluster_utils" for a in node.names):
            return True
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "ray.init":
            return True
    return False


def test_only_the_ray_tests_start_ray():
    """``make check`` (the unit and page tests) never starts Ray: a test that does lives in
    tests/ray/, which one xdist worker runs alone (tests/support/xdist_schedule.py)."""
    elsewhere = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("*.py"))
        if path.parent.name != "ray" and starts_ray(path)
    ]
    assert not elsewhere, elsewhere
    assert starts_ray(TESTS / "ray" / "test_ray.py")  # the check sees a cluster's start
