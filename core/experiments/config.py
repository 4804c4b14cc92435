"""An experiment's file: the studio's own YAML, or a promptfoo configuration as it is,
read into one :class:`Plan` (tests x prompts x providers, and the checks).

The studio's file names a ``dataset`` (a table, or a batch file), the variants (``prompts``,
``system_prompts``, ``models`` and ``params`` as a grid, or a ``variants`` list) and the
checks (``rules`` of Checks, promptfoo ``assert``). A ``promptfooconfig.yaml`` gives
``prompts``, ``providers``, ``tests`` and ``defaultTest``. Either file is refused whole,
each problem naming its line, before anything runs: YAML past its size or alias limits, a
``file://`` path outside the file's folder, an unknown or code-running assertion, a
template variable a test lacks, a provider with no local model.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.experiments import assertions as asserts
from core.model_folders import ModelError, check_model_folder
from core.plan.bounded_render import Renderer, TemplateProblem
from core.plan.tables import BuildError, plain, read_table
from core.qa.rules import RuleSet, StrictLoader, line_of
from core.schemas import problem_message

MAX_FILE_BYTES = 1 << 20  # an experiment file, or a file:// it reads; prompts fit in far less
TABLE_SUFFIXES = (".csv", ".parquet", ".xlsx")
# Names a template may read that are Jinja's own, not a test's variables.
TEMPLATE_GLOBALS = {"range", "loop", "dict", "lipsum", "cycler", "joiner", "namespace"}
SAMPLING = ("temperature", "max_tokens", "seed", "top_p")
# Provider ids whose "model" is code or a remote service: never a local model.
CODE_PROVIDERS = ("exec", "python", "file", "js", "javascript", "http", "https", "webhook")


class ExperimentError(ValueError):
    """An experiment file that cannot run; ``problems`` hold one sentence per problem,
    each naming its line where it has one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class Assertion(BaseModel):
    """One promptfoo assertion (``metric`` names its column in the matrix)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: str
    value: Any = None
    threshold: float | None = None
    metric: str | None = None
    weight: float | None = None  # accepted; every assertion counts the same here

    @property
    def column(self) -> str:
        if self.metric:
            return self.metric
        if self.value is None:
            return self.type
        value = self.value if isinstance(self.value, str) else json.dumps(self.value)
        return f"{self.type}: {value[:60]}"


class TestCase(BaseModel):
    """One item of the dataset: its variables and what its answers must meet; a batch
    file's line brings its own conversation (``messages``)."""

    __test__ = False  # not a pytest class

    description: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    asserts: list[Assertion] = Field(default_factory=list)
    messages: list[dict[str, Any]] | None = None


class PromptVariant(BaseModel):
    """A prompt: its messages as templates (role, template text); None: a batch line's
    own conversation. ``system`` replaces or adds the system message."""

    id: str
    label: str | None = None
    messages: list[tuple[str, str]] | None = None
    system: str | None = None

    @property
    def name(self) -> str:
        return self.label or self.id


class Provider(BaseModel):
    """A model with its sampling settings: ``model`` is the lines' ``body.model``, which
    the job's model map sends to ``folder``."""

    id: str
    label: str | None = None
    model: str
    folder: str
    temperature: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    top_p: float | None = None

    @property
    def name(self) -> str:
        return self.label or self.id


class Plan(BaseModel):
    """What an experiment runs and grades: each test under each (prompt, provider) cell."""

    name: str
    tests: list[TestCase]
    prompts: list[PromptVariant]
    providers: list[Provider]
    cells: list[tuple[int, int]]  # (prompt, provider) pairs: the grid, or a list's pairs
    rules: RuleSet | None = None

    def variables(self) -> list[str]:
        names: dict[str, None] = {}
        for test in self.tests:
            names.update(dict.fromkeys(test.vars))
        return list(names)


# -- YAML ----------------------------------------------------------------------------------


def load_yaml(text: str, what: str = "the experiment file") -> tuple[Any, Any]:
    """The data of a YAML text and its composed node tree (for line numbers); past the
    size cap, alias expansion or nesting limits it is refused before it is built."""
    if len(text) > MAX_FILE_BYTES:
        raise ExperimentError([f"{what} is larger than {MAX_FILE_BYTES // 1024} KiB"])
    try:
        root = yaml.compose(text, Loader=StrictLoader)
        data = yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ExperimentError([f"{where}{what} is not valid YAML: {problem}"]) from None
    return data, root


class _Reader:
    """Collects problems with their lines while a file is read into a plan."""

    def __init__(self, root: Any, folder: Path) -> None:
        self.root, self.folder, self.problems = root, folder.resolve(), []

    def line(self, *loc: Any) -> int | None:
        return line_of(self.root, list(loc))

    def problem(self, loc: tuple[Any, ...], message: str) -> None:
        line = self.line(*loc)
        self.problems.append(f"line {line}: {message}" if line else message)

    def file(self, ref: str, loc: tuple[Any, ...]) -> Path | None:
        """The file a ``file://`` reference names, inside the experiment's folder."""
        path = (self.folder / ref.removeprefix("file://")).resolve()
        if not path.is_relative_to(self.folder):
            self.problem(loc, f"{ref} lies outside the experiment's folder ({self.folder})")
            return None
        if not path.is_file():
            self.problem(loc, f"{ref}: no such file in {self.folder}")
            return None
        if path.stat().st_size > MAX_FILE_BYTES:
            self.problem(loc, f"{ref} is larger than {MAX_FILE_BYTES // 1024} KiB")
            return None
        return path

    def text(self, value: Any, loc: tuple[Any, ...]) -> Any:
        """A value, or the text of the file a ``file://`` value names."""
        if isinstance(value, str) and value.startswith("file://"):
            path = self.file(value, loc)
            return path.read_text(encoding="utf-8", errors="replace") if path else ""
        return value

    def validate(self, model: type[BaseModel], data: Any, loc: tuple[Any, ...]) -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                field = ".".join(str(p) for p in error["loc"])
                message = problem_message(error)
                if error["type"] == "extra_forbidden":
                    message = f"unknown field {error['loc'][-1]!r}"
                self.problem((*loc, *error["loc"]), f"{field}: {message}" if field else message)
            return None

    def assertion(self, data: Any, loc: tuple[Any, ...]) -> Assertion | None:
        if isinstance(data, dict) and isinstance(data.get("type"), str):
            problem = asserts.type_problem(data["type"])
            if problem:
                self.problem((*loc, "type"), problem)
                return None
            if "value" in data:
                data = {**data, "value": self.text(data["value"], (*loc, "value"))}
        found = self.validate(Assertion, data, loc)
        if found is not None and (problem := asserts.value_problem(found.type, found.value)):
            self.problem((*loc, "value"), problem)
            return None
        return found

    def assertions(self, data: Any, loc: tuple[Any, ...]) -> list[Assertion]:
        if data is None:
            return []
        if not isinstance(data, list):
            self.problem(loc, "assert is a list of assertions")
            return []
        found = [self.assertion(a, (*loc, i)) for i, a in enumerate(data)]
        return [a for a in found if a is not None]


# -- prompts and providers ---------------------------------------------------------------


def _messages(raw: str) -> list[tuple[str, str]]:
    """A prompt's messages: a JSON list of ``{role, content}`` (promptfoo's chat prompt),
    else the whole text as the user's message."""
    stripped = raw.strip()
    if stripped.startswith("["):
        try:
            chat = json.loads(stripped)
        except ValueError:
            chat = None
        if isinstance(chat, list) and all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in chat
        ):
            return [(str(m.get("role", "user")), m["content"]) for m in chat]
    return [("user", raw)]


def _prompts(reader: _Reader, data: Any, key: str) -> list[PromptVariant]:
    items = data if isinstance(data, list) else [data]
    found = []
    for i, item in enumerate(items):
        loc = (key, i) if isinstance(data, list) else (key,)
        if isinstance(item, str):
            raw, pid, label = (
                reader.text(item, loc),
                item if len(item) <= 60 else f"prompt {i + 1}",
                None,
            )
        elif isinstance(item, dict) and isinstance(item.get("raw"), str):
            extra = set(item) - {"id", "label", "raw"}
            if extra:
                reader.problem(loc, f"a prompt takes id, label and raw, not {sorted(extra)}")
            raw = reader.text(item["raw"], (*loc, "raw"))
            pid, label = str(item.get("id") or f"prompt {i + 1}"), item.get("label")
        else:
            reader.problem(loc, "a prompt is a text, or a mapping with raw (and id, label)")
            continue
        found.append(PromptVariant(id=pid, label=label, messages=_messages(str(raw))))
    return found


def model_name(provider_id: str) -> str:
    """The model a promptfoo provider id names: ``gpt-4o-mini`` in ``openai:chat:gpt-4o-mini``."""
    parts = provider_id.split(":")
    if len(parts) > 2 and parts[1] in ("chat", "completion", "messages", "responses"):
        return ":".join(parts[2:])
    return ":".join(parts[1:]) if len(parts) > 1 else provider_id


def _resolve(
    reader: _Reader, name: str, loc: tuple[Any, ...], model_map: dict[str, str], default: Path
) -> tuple[str, str] | None:
    """``(body.model, folder)`` for a model name: a mapped name, a model folder's path, or
    an unmapped name, which runs on the job's model (as the check maps it)."""
    if name in model_map:
        try:
            return name, str(check_model_folder(model_map[name]))
        except ModelError as exc:
            reader.problem(loc, f"{name!r} maps to no model: {exc}")
            return None
    if "/" in name or name.startswith("~"):  # a model folder's path
        try:
            folder = check_model_folder(name)
        except ModelError as exc:
            reader.problem(loc, str(exc))
            return None
        return folder.name, str(folder)
    try:
        check_model_folder(default)
    except ModelError:
        reader.problem(
            loc,
            f"the provider {name!r} has no local model: map it with --map {name}=FOLDER "
            f"(or prepare the built-in model, {default})",
        )
        return None
    return name, str(default)


def _provider(
    reader: _Reader, item: Any, loc: tuple[Any, ...], model_map: dict[str, str], default: Path
) -> Provider | None:
    if isinstance(item, str):
        item = {"id": item}
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        reader.problem(loc, "a provider is an id, or a mapping with id (and label, config)")
        return None
    extra = set(item) - {"id", "label", "config"}
    if extra:
        reader.problem(loc, f"a provider takes id, label and config, not {sorted(extra)}")
    pid = item["id"]
    if pid.split(":")[0] in CODE_PROVIDERS or pid.startswith("file://"):
        reader.problem((*loc, "id"), f"provider {pid!r} runs code or calls out: not a local model")
        return None
    config = item.get("config") or {}
    if not isinstance(config, dict):
        reader.problem((*loc, "config"), "a provider's config is a mapping")
        return None
    unknown = set(config) - set(SAMPLING)
    if unknown:
        reader.problem(
            (*loc, "config", sorted(unknown)[0]),
            f"config {sorted(unknown)} not supported; a provider's config takes "
            + ", ".join(SAMPLING),
        )
    resolved = _resolve(reader, model_name(pid), (*loc, "id"), model_map, default)
    if resolved is None:
        return None
    settings = {k: config[k] for k in SAMPLING if k in config}
    data = {"id": pid, "label": item.get("label"), "model": resolved[0], "folder": resolved[1]}
    return reader.validate(Provider, {**data, **settings}, (*loc, "config"))


# -- the two formats -----------------------------------------------------------------------


def _tests(reader: _Reader, data: Any, default: dict[str, Any]) -> list[TestCase]:
    """promptfoo's ``tests`` (a list, or a ``file://`` CSV / YAML of them) with
    ``defaultTest`` under each."""
    loc: tuple[Any, ...] = ("tests",)
    if isinstance(data, str) and data.startswith("file://"):
        path = reader.file(data, loc)
        if path is None:
            return []
        if path.suffix.lower() in TABLE_SUFFIXES:
            try:
                data = [{"vars": {k: plain(v) for k, v in row.items()}}
                        for row in read_table(path).to_dict("records")]  # fmt: skip
            except BuildError as exc:
                reader.problem(loc, f"{data}: {exc}")
                return []
        else:
            data, _ = load_yaml(path.read_text(encoding="utf-8", errors="replace"), data)
    if not isinstance(data, list) or not data:
        reader.problem(loc, "tests is a list of tests (each with vars and assert)")
        return []
    base_asserts = reader.assertions(default.get("assert"), ("defaultTest", "assert"))
    found = []
    for i, test in enumerate(data):
        if not isinstance(test, dict):
            reader.problem((*loc, i), "a test is a mapping (vars, assert, description)")
            continue
        extra = set(test) - {"description", "vars", "assert", "metadata", "options"}
        if extra:
            reader.problem(
                (*loc, i), f"a test takes description, vars and assert, not {sorted(extra)}"
            )
        options = test.get("options") or {}
        if isinstance(options, dict) and {"transform", "postprocess"} & set(options):
            reader.problem((*loc, i, "options"), "options.transform runs code: refused")
        values = {**(default.get("vars") or {}), **(test.get("vars") or {})}
        values = {k: reader.text(v, (*loc, i, "vars", k)) for k, v in values.items()}
        found.append(
            TestCase(
                description=str(test["description"]) if test.get("description") else None,
                vars=values,
                asserts=[
                    *base_asserts,
                    *reader.assertions(test.get("assert"), (*loc, i, "assert")),
                ],
            )
        )
    return found


def _promptfoo(reader: _Reader, data: dict, model_map: dict[str, str], default: Path) -> Plan:
    for key in ("prompts", "providers", "tests"):
        if key not in data:
            reader.problem((), f"a promptfoo configuration needs {key}")
    defaults = data.get("defaultTest") or {}
    if not isinstance(defaults, dict):
        reader.problem(("defaultTest",), "defaultTest is a mapping (vars, assert)")
        defaults = {}
    if isinstance(defaults.get("options"), dict) and "transform" in defaults["options"]:
        reader.problem(("defaultTest", "options"), "options.transform runs code: refused")
    prompts = _prompts(reader, data.get("prompts", []), "prompts")
    raw = data.get("providers", [])
    items = raw if isinstance(raw, list) else [raw]
    providers = [
        _provider(reader, p, ("providers", i) if isinstance(raw, list) else ("providers",),
                  model_map, default)
        for i, p in enumerate(items)
    ]  # fmt: skip
    tests = _tests(reader, data.get("tests"), defaults)
    providers = [p for p in providers if p is not None]
    cells = list(itertools.product(range(len(prompts)), range(len(providers))))
    name = str(data.get("description") or "promptfoo experiment")
    return Plan(name=name, tests=tests, prompts=prompts, providers=providers, cells=cells)


class _Native(BaseModel):
    """The studio's experiment file (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str | None = None
    dataset: str
    prompts: list[Any] | None = None
    system_prompts: list[str] | None = None
    models: list[str] | None = None
    params: dict[str, list[Any]] | None = None
    variants: list[dict[str, Any]] | None = None
    rules: list[Any] | None = None
    assert_: list[Any] | None = Field(default=None, alias="assert")


def _dataset(reader: _Reader, ref: str) -> list[TestCase]:
    path = reader.file(ref if ref.startswith("file://") else f"file://{ref}", ("dataset",))
    if path is None:
        return []
    if path.suffix.lower() in TABLE_SUFFIXES:
        try:
            rows = read_table(path).to_dict("records")
        except BuildError as exc:
            reader.problem(("dataset",), f"{ref}: {exc}")
            return []
        return [TestCase(vars={k: plain(v) for k, v in row.items()}) for row in rows]
    tests = []  # a batch file: each line's own conversation
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            messages = line["body"]["messages"]
            assert isinstance(messages, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            reader.problem(("dataset",), f"{ref} line {number}: not a chat request line")
            continue
        tests.append(TestCase(description=str(line.get("custom_id", number)), messages=messages))
    return tests


def _native(reader: _Reader, data: dict, model_map: dict[str, str], default: Path) -> Plan:
    native = reader.validate(_Native, data, ())
    if native is None:
        return Plan(name="", tests=[], prompts=[], providers=[], cells=[])
    tests = _dataset(reader, native.dataset)
    shared = reader.assertions(native.assert_, ("assert",))
    for test in tests:
        test.asserts = list(shared)
    rules = None
    if native.rules:
        try:
            rules = RuleSet.model_validate({"rules": native.rules})
        except ValidationError as exc:
            for error in exc.errors():
                reader.problem(tuple(error["loc"]), problem_message(error))
    batch = bool(tests) and tests[0].messages is not None
    if native.variants:
        prompts, providers = [], []
        for i, v in enumerate(native.variants):
            loc = ("variants", i)
            text = v.get("prompt")
            messages = None if text is None else _messages(str(reader.text(text, (*loc, "prompt"))))
            label = v.get("label") or f"variant {i + 1}"
            prompts.append(PromptVariant(id=label, messages=messages, system=v.get("system")))
            config = {k: v[k] for k in SAMPLING if k in v}
            unknown = set(v) - {"label", "prompt", "system", "model", *SAMPLING}
            if unknown:
                reader.problem(loc, f"a variant takes label, prompt, system, model and "
                               f"{', '.join(SAMPLING)}, not {sorted(unknown)}")  # fmt: skip
            provider = _provider(
                reader, {"id": f"local:{v.get('model') or default.name}", "label": label,
                         "config": config}, loc, model_map, default,
            )  # fmt: skip
            if provider is not None:
                providers.append(provider)
        cells = [(i, i) for i in range(min(len(prompts), len(providers)))]
    else:
        texts = native.prompts or ([None] if batch else [])
        systems = native.system_prompts or [None]
        base = [] if texts == [None] else _prompts(reader, texts, "prompts")
        prompts = []
        for k, system in enumerate(systems):
            for p in base or [PromptVariant(id="the line's own")]:
                suffix = f" / system {k + 1}" if system is not None and len(systems) > 1 else ""
                prompts.append(p.model_copy(update={"system": system, "label": p.name + suffix}))
        grid = native.params or {}
        keys = [k for k in grid if k in SAMPLING]
        for k in set(grid) - set(SAMPLING):
            reader.problem(("params", k), f"params takes {', '.join(SAMPLING)}, not {k!r}")
        providers = []
        for m, model in enumerate(native.models or [default.name]):
            for combo in itertools.product(*(grid[k] for k in keys)):
                config = dict(zip(keys, combo, strict=True))
                label = " ".join([Path(model).name, *(f"{k}={v}" for k, v in config.items())])
                item = {"id": f"local:{model}", "label": label, "config": config}
                provider = _provider(reader, item, ("models", m), model_map, default)
                if provider is not None:
                    providers.append(provider)
        cells = list(itertools.product(range(len(prompts)), range(len(providers))))
    if not batch and any(p.messages is None for p in prompts):
        reader.problem(("prompts",), "a table dataset needs prompts (templates over its columns)")
    name = native.name or native.description or Path(native.dataset).stem
    return Plan(
        name=name, tests=tests, prompts=prompts, providers=providers, cells=cells, rules=rules
    )


# -- the templates against the tests --------------------------------------------------------


def _check_templates(reader: _Reader, plan: Plan, promptfoo: bool) -> None:
    """Every template compiles and reads only variables every test has."""
    templates = {}
    for i, prompt in enumerate(plan.prompts):
        for k, (_, text) in enumerate(prompt.messages or []):
            templates[f"p{i}.{k}"] = text
        if prompt.system:
            templates[f"p{i}.s"] = prompt.system
    if not templates:
        return
    try:
        with Renderer(templates) as renderer:
            names = renderer.names
    except TemplateProblem as exc:
        index = int(exc.template.split(".")[0][1:])
        reader.problem(("prompts", index), f"prompt {index + 1}, template line {exc.line}: "
                       f"{exc.message}")  # fmt: skip
        return
    for name, used in names.items():
        index = int(name.split(".")[0][1:])
        needed = used - TEMPLATE_GLOBALS
        for t, test in enumerate(plan.tests):
            missing = sorted(needed - set(test.vars))
            if missing:
                where = ("tests", t) if promptfoo else ("dataset",)
                which = test.description or f"test {t + 1}"
                reader.problem(
                    ("prompts", index),
                    f"prompt {plan.prompts[index].name!r} reads {', '.join(missing)}, which "
                    f"{which} (line {reader.line(*where)}) lacks",
                )
                break


def read_plan(path: Path, model_map: dict[str, str], default_model: Path) -> Plan:
    """The plan of an experiment file (the studio's, or a promptfoo configuration).

    Raises:
        ExperimentError: every problem found, each with its line; nothing has run.
    """
    path = Path(path)
    if not path.is_file():
        raise ExperimentError([f"{path} does not exist or is not a file"])
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ExperimentError([f"{path.name} is larger than {MAX_FILE_BYTES // 1024} KiB"])
    data, root = load_yaml(path.read_text(encoding="utf-8", errors="replace"))
    if not isinstance(data, dict):
        raise ExperimentError(["line 1: an experiment file is a mapping (dataset, or prompts, "
                               "providers and tests)"])  # fmt: skip
    reader = _Reader(root, path.parent)
    promptfoo = "dataset" not in data
    read = _promptfoo if promptfoo else _native
    plan = read(reader, data, model_map, default_model)
    if not reader.problems:
        if not plan.tests or not plan.cells:
            reader.problem((), "the experiment has no tests or no variants to run")
        else:
            _check_templates(reader, plan, promptfoo)
    if reader.problems:
        raise ExperimentError(reader.problems)
    return plan
