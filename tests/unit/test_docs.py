"""The docs cannot drift: the CLI reference is the commands' --help, every relative link and
picture in README.md and docs/ points at something, and the README's two commands are the
ones CI runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.config import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import cli_docs

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
IMG = re.compile(r"<img[^>]*\ssrc=\"([^\"]+)\"")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    """Each relative link or picture of a Markdown page that points nowhere, as text."""
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    broken = []
    for target in [*LINK.findall(text), *IMG.findall(text)]:
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.relative_to(REPO_ROOT)}: {target} (no such heading)")
    return broken


def test_the_cli_reference_is_what_the_commands_help_says() -> None:
    reference = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert reference == cli_docs.render(), "docs/cli.md is out of date: run `make docs`"
    # And the parser rendered is the one a user's --help runs, word for word.
    for command in ([], ["run"], ["jobs", "rename"]):
        shown = subprocess.run(
            [sys.executable, "-m", "core", *command, "--help"],
            cwd=REPO_ROOT,
            env={**os.environ, "COLUMNS": cli_docs.WIDTH},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert f"```text\n{shown.rstrip()}\n```" in reference, command


def test_the_cli_reference_check_fails_on_a_changed_option(monkeypatch) -> None:
    import core.cli.main

    real = core.cli.main.build_parser

    def with_new_option():  # a command gains an option the reference does not know
        parser = real()
        parser.add_argument("--brand-new-option")
        return parser

    monkeypatch.setattr(core.cli.main, "build_parser", with_new_option)
    assert "--brand-new-option" in cli_docs.render()
    assert (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8") != cli_docs.render()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_and_picture_points_at_something(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_finds_a_missing_file_picture_and_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading: with `code`\n", encoding="utf-8")
    page.write_text(
        "[ok](there.md#a-heading-with-code) [web](https://example.com) `[code](nowhere.md)`\n"
        "[gone](nowhere.md) ![gone](images/none.png) [bad](there.md#no-heading)\n"
        '<img src="none.svg">\n```\n[in a block](nowhere.md)\n```\n',
        encoding="utf-8",
    )
    found = [line.split(": ", 1)[1] for line in broken_links_at(page)]
    assert found == [
        "nowhere.md (no such file)",
        "images/none.png (no such file)",
        "there.md#no-heading (no such heading)",
        "none.svg (no such file)",
    ]


def broken_links_at(page: Path) -> list[str]:
    """broken_links for a page outside the repository (names relative to its folder)."""
    global REPO_ROOT
    saved, REPO_ROOT = REPO_ROOT, page.parent
    try:
        return broken_links(page)
    finally:
        REPO_ROOT = saved


def test_every_doc_page_is_reachable_from_the_readme() -> None:
    seen, todo = set(), [REPO_ROOT / "README.md"]
    while todo:
        page = todo.pop()
        if page in seen:
            continue
        seen.add(page)
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            path = target.partition("#")[0]
            if path.endswith(".md") and "://" not in path:
                todo.append((page.parent / path).resolve())
    unreachable = [str(p.relative_to(REPO_ROOT)) for p in PAGES if p.resolve() not in seen]
    assert unreachable == []


def test_the_readmes_two_commands_are_the_ones_ci_and_the_makefile_run() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The two commands", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["make run", "make test"]
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test" in [line.strip() for line in ci], ".ci/run does not run `make test`"
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("run", "test"):
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no `{target}` target"


def test_the_makefiles_commands_let_python_keep_bytecode_where_the_environment_forbids_it() -> None:
    # Without bytecode every process compiles vLLM and torch from source: `make test` on
    # our CI's machines (PYTHONDONTWRITEBYTECODE=1) spent twice the CPU on each import.
    probe = subprocess.run(
        ["make", "-s", "--no-print-directory", "--eval",
         'probe: ; @echo "[$${PYTHONDONTWRITEBYTECODE-unset}]"', "probe"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )  # fmt: skip
    assert probe.stdout.strip() == "[unset]"
    script = (REPO_ROOT / "scripts" / "test.sh").read_text(encoding="utf-8")
    assert re.search(r"^unset PYTHONDONTWRITEBYTECODE\b", script, re.M)


def test_the_benchmark_pictures_are_drawn_from_the_benchmarks_saved_output() -> None:
    from bench import plots

    saved = sorted(plots.RESULTS.glob("*.txt"))
    assert saved, "bench/results/ holds no benchmark output"
    for source in saved:
        chart = plots.CHARTS[source.stem](source.read_text(encoding="utf-8"))
        drawn = (plots.IMAGES / f"bench-{source.stem}.svg").read_text(encoding="utf-8")
        assert drawn == plots.svg(*chart), f"{source.name} changed: run `make plots`"
    # The warm bench's figures as its table prints them (with the engine's own time or,
    # in older output, without): completion seconds, cold and warm per batch.
    table = (
        "batch                      first result (engine)  completed model load  running\n"
        "chat   1 line(s), cold           14.13s    0.47s     14.15s      13.1s   13.65s\n"
        "chat   1 line(s), warm            0.47s    0.41s      0.48s       0.0s    0.06s\n"
        "embeddings 100 line(s), cold       10.00s     10.01s       9.5s    9.84s\n"
        "embeddings 100 line(s), warm        0.20s      0.21s       0.0s    0.06s\n"
    )
    _title, bars, series, _ = plots.warm(table)
    assert series == ["cold", "warm"]
    assert bars == [("chat, 1 line", [14.15, 0.48]), ("embeddings, 100 lines", [10.01, 0.21])]


def test_every_picture_in_docs_images_is_shown_and_made_by_the_browser_walk() -> None:
    import docs_images

    shown = "".join(page.read_text(encoding="utf-8") for page in PAGES)
    for picture in (REPO_ROOT / "docs" / "images").iterdir():
        assert f"images/{picture.name}" in shown, f"{picture.name} is shown on no page"
    # Each screenshot the docs use is one a browser test takes, by that name.
    browser_tests = (REPO_ROOT / "tests" / "browser" / "test_browser.py").read_text(
        encoding="utf-8"
    )
    taken = set(re.findall(r'screenshot\(page, "(\w+)"\)', browser_tests))
    from tests.support.browser import PAGES as SIDEBAR

    for number, label in enumerate(SIDEBAR, start=1):  # the walk's shot of every page
        slug = re.sub(r"\W+", "_", label.lower()).strip("_")
        taken.add(f"page_{number:02d}_{slug}")
    for name, shot in docs_images.PICTURES.items():
        assert (REPO_ROOT / "docs" / "images" / f"{name}.png").is_file(), name
        assert shot in taken, f"no browser test takes the screenshot {shot!r}"
