"""Build a batch file from a table (CSV, Parquet, Excel) without writing code.

A system prompt and a user prompt template (Jinja2, with the table's columns as
placeholders: ``{{ subject }}``, or ``{{ row["column name"] }}`` for any name) are rendered
for every row into an OpenAI chat-completions line. Each line gets a stable ``custom_id``
(``{task}:{source_id}``, the id column's value or the row number) and ``metadata`` with
``task``, ``job_id``, ``source_id`` and ``prompt_version``, so results can be joined back to
the table. Empty cells the templates use, missing columns and template errors are
reported by row; such rows are left out of the file.

The same table can instead become a ``/v1/embeddings`` batch (:class:`EmbedSpec`, built by
:mod:`core.plan.embed_builder`); :func:`preview`, :func:`dry_run` and :func:`build_file` take
either spec. What both share (reading tables, ids, problems) is :mod:`core.plan.tables`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from core.endpoints import CHAT_URL
from core.plan.bounded_render import (
    MAX_SLOW_ROWS,
    Renderer,
    RenderError,
    RenderTimeout,
    TemplateProblem,
)
from core.plan.embed_builder import EmbedSpec, embedding_lines
from core.plan.rerank_builder import RerankSpec, rerank_lines
from core.plan.tables import (  # noqa: F401 (the builder's names, for its callers)
    ROW_NUMBERS,
    TABLE_SUFFIXES,
    BuildError,
    BuildProblem,
    BuildResult,
    Step,
    collect,
    default_id_column,
    default_text_column,
    free_file_name,
    id_problems,
    plain,
    read_table,
    safe_file_name,
    source_ids,
)


@dataclass
class BuildSpec:
    """What to build. ``params`` go into each body as they are (``max_tokens``, ...)."""

    user_template: str
    system_prompt: str = ""
    id_column: str | None = ROW_NUMBERS
    task: str = "task"
    model: str = "gpt-4o-mini"
    prompt_version: str = "v1"
    job_id: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    skip_empty: bool = True


AnySpec = BuildSpec | EmbedSpec | RerankSpec  # chats from templates, texts to embed, reranks


_LABELS = {"system": "system prompt", "user": "user template"}


# Identifiers that a template does not read as a column: ``row`` is the whole row, ``self``
# the template itself, and the rest are Jinja's constants.
_NOT_PLACEHOLDERS = frozenset({"row", "self", "true", "false", "none", "True", "False", "None"})


def default_user_template(column: str) -> str:
    """A user prompt template that is one column's cell: ``{{ column }}``, or
    ``{{ row['column name'] }}`` for a name a template cannot read as itself (spaces,
    dots, ``row``, ``self``, ``true``, ...)."""
    if column.isidentifier() and column not in _NOT_PLACEHOLDERS:
        return f"{{{{ {column} }}}}"
    return f"{{{{ row[{column!r}] }}}}"


def _renderer(spec: BuildSpec) -> Renderer:
    """The spec's templates, compiled in their rendering process (core.plan.bounded_render).

    Raises:
        BuildError: a template does not compile (the message gives its line).
    """
    templates = {"user": spec.user_template}
    if spec.system_prompt.strip():
        templates["system"] = spec.system_prompt
    try:
        return Renderer(templates)
    except TemplateProblem as exc:
        raise BuildError(f"{_LABELS[exc.template]} line {exc.line}: {exc.message}") from None
    except RenderError as exc:  # compiling ran past a bound
        raise BuildError(f"the templates cannot be compiled: {exc}") from None


def _row_columns(template_text: str) -> set[str]:
    """Columns named as ``row["name"]`` or ``row['name']`` (for empty-cell checks)."""
    return set(re.findall(r"""row\[\s*["']([^"']+)["']\s*\]""", template_text))


def build_lines(table: pd.DataFrame, spec: BuildSpec, limit: int | None = None) -> Iterator[Step]:
    """Yields a :class:`Step` per data row (1-based); its ``line`` None when left out.

    Raises:
        BuildError: missing columns, a template syntax error or an unknown id column.
    """
    if not spec.user_template.strip():
        raise BuildError("the user prompt template is empty")
    if not spec.task.strip():
        raise BuildError("the task name is empty; it starts every custom_id")
    renderer = _renderer(spec)
    with renderer:
        names = set().union(*renderer.names.values())  # the columns they use, or ``row``
        missing = sorted(names - set(table.columns) - {"row"})
        if missing:
            raise BuildError(
                f"the templates use {', '.join(repr(m) for m in missing)}, which the table "
                f"does not have; columns: {', '.join(table.columns)}"
            )
        used = (names - {"row"}) | _row_columns(spec.system_prompt + spec.user_template)
        ids = source_ids(table, spec.id_column)
        first_row_of: dict[str, int] = {}
        columns = list(table.columns)
        slow_rows = 0
        for index, values in enumerate(table.itertuples(index=False, name=None)):
            row_no = index + 1
            if limit is not None and row_no > limit:
                return
            cells = {c: plain(v) for c, v in zip(columns, values, strict=True)}
            problems = _row_problems(spec, row_no, ids[index], first_row_of, cells, used)
            if any(p.severity == "error" for p in problems):
                yield Step(row_no, None, problems, False)
                continue
            values = {c: ("" if v is None else v) for c, v in cells.items()}
            # ``row`` is the whole row, also where a column is named ``row`` (``row['row']``)
            context = {**values, "row": values}
            try:
                user_text = renderer.render("user", context).strip()
                system_text = (
                    renderer.render("system", context) if spec.system_prompt.strip() else ""
                )
            except RenderError as exc:
                problems.append(BuildProblem(row_no, "error", f"template error: {exc}"))
                yield Step(row_no, None, problems, False)
                slow_rows += isinstance(exc, RenderTimeout)
                if slow_rows >= MAX_SLOW_ROWS:  # the template, not the rows: stop the build
                    raise BuildError(
                        f"the template ran past {renderer.seconds:g} s on {slow_rows} rows; "
                        "make its loops smaller before building"
                    ) from None
                continue
            if not user_text:
                problems.append(BuildProblem(row_no, "error", "the user prompt renders empty"))
                yield Step(row_no, None, problems, False)
                continue
            line = _line(spec, ids[index], system_text.strip(), user_text)
            yield Step(row_no, line, problems, True)


def _row_problems(
    spec: BuildSpec,
    row_no: int,
    source_id: str,
    first_row_of: dict[str, int],
    cells: dict[str, Any],
    used: set[str],
) -> list[BuildProblem]:
    """What keeps a row from becoming a line before its templates are rendered."""
    problems = id_problems(spec.id_column, row_no, source_id, first_row_of)
    empty = sorted(c for c in used if c in cells and cells[c] is None)
    if empty:
        listed = ", ".join(repr(c) for c in empty)
        if spec.skip_empty:
            problems.append(BuildProblem(row_no, "error", f"empty cell in {listed}; row left out"))
        else:
            message = f"empty cell in {listed}; rendered as ''"
            problems.append(BuildProblem(row_no, "warning", message))
    return problems


def _line(spec: BuildSpec, source_id: str, system_text: str, user_text: str) -> dict[str, Any]:
    messages = [{"role": "system", "content": system_text}] if system_text else []
    messages.append({"role": "user", "content": user_text})
    metadata = {"task": spec.task, "source_id": source_id, "prompt_version": spec.prompt_version}
    if spec.job_id:
        metadata["job_id"] = spec.job_id
    body = {"model": spec.model, "messages": messages}
    body.update({k: v for k, v in spec.params.items() if v is not None})
    body["metadata"] = metadata
    return {
        "custom_id": f"{spec.task}:{source_id}",
        "method": "POST",
        "url": CHAT_URL,
        "body": body,
    }


def _steps(table: pd.DataFrame, spec: AnySpec, limit: int | None = None) -> Iterator[Step]:
    if isinstance(spec, EmbedSpec):  # a preview's limit counts lines, of N rows each
        return embedding_lines(table, spec, max_lines=limit)
    if isinstance(spec, RerankSpec):  # a line per query: a preview's limit counts lines
        return rerank_lines(table, spec, max_lines=limit)
    return build_lines(table, spec, limit)


def preview(table: pd.DataFrame, spec: AnySpec, rows: int = 5) -> BuildResult:
    """The first ``rows`` rows (embeddings: lines) made into lines, kept in
    ``BuildResult.lines``."""
    return collect(_steps(table, spec, limit=rows), keep_lines=True)


def build_file(
    table: pd.DataFrame, spec: AnySpec, out: str | Path, *, replace: bool = False
) -> BuildResult:
    """Makes every row into lines and writes them to ``out`` (JSONL, UTF-8).

    Raises:
        BuildError: ``out`` exists and ``replace`` was not asked for (a save never
            overwrites a file silently; :func:`free_file_name` offers another name).
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        handle = out.open("w" if replace else "x", encoding="utf-8")
    except FileExistsError:
        free = free_file_name(out.parent, out.name)
        raise BuildError(f"{out.name} exists already: save as {free}, or replace it") from None
    with handle:
        result = collect(_steps(table, spec), out=handle)
    result.path = str(out)
    return result


def dry_run(table: pd.DataFrame, spec: AnySpec) -> BuildResult:
    """Makes every row into lines without writing anything: the problems and counts a
    build gives."""
    return collect(_steps(table, spec))
