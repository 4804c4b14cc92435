"""Build a batch file from a table (CSV, Parquet, Excel) without writing code.

A system prompt and a user prompt template (Jinja2, with the table's columns as
placeholders: ``{{ subject }}``, or ``{{ row["column name"] }}`` for any name) are rendered
for every row into an OpenAI chat-completions line. Each line gets a stable ``custom_id``
(``{task}:{source_id}``, the id column's value or the row number) and ``metadata`` with
``task``, ``job_id``, ``source_id`` and ``prompt_version``, so results can be joined back to
the table. Empty cells the templates use, missing columns and template errors are
reported by row; such rows are left out of the file.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

import jinja2
import pandas as pd
from jinja2 import meta

from core.check.requests import CHAT_URL
from core.plan.bounded_render import (
    BoundedSandbox,
    RenderLimit,
    RenderTimeout,
    RenderWatch,
    render,
)

TABLE_SUFFIXES = (".csv", ".parquet", ".xlsx")
ROW_NUMBERS = None  # BuildSpec.id_column value meaning "use row numbers"
MAX_PROBLEMS = 10_000
MAX_SLOW_ROWS = 3  # rows stopped for time before the whole build stops


class BuildError(ValueError):
    """The table or the templates cannot be used at all; the message says why."""


@dataclass(frozen=True)
class BuildProblem:
    """A finding about one data row (row 0: the table or the templates as a whole)."""

    row: int
    severity: Literal["error", "warning"]
    message: str

    def __str__(self) -> str:
        where = f"row {self.row}" if self.row else "table"
        return f"{where}: {self.severity}: {self.message}"


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


@dataclass
class BuildResult:
    """What a build wrote (or would write) and what it left out, by row."""

    rows: int = 0
    written: int = 0
    problems: list[BuildProblem] = field(default_factory=list)
    path: str | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)  # filled by preview only

    @property
    def skipped(self) -> int:
        return self.rows - self.written


def read_table(source: str | Path | bytes, name: str | None = None) -> pd.DataFrame:
    """Reads a CSV, Parquet or Excel (.xlsx, first sheet) table.

    Args:
        source: a path, or the file's bytes (then ``name`` gives the suffix).
        name: the file name, when ``source`` is bytes.

    Raises:
        BuildError: an unknown kind of file, or one that cannot be read.
    """
    label = name if name is not None else ("" if isinstance(source, bytes) else str(source))
    suffix = Path(label).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise BuildError(f"use a {', '.join(TABLE_SUFFIXES)} file (got {suffix or 'no suffix'!r})")
    data = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        if suffix == ".csv":
            table = pd.read_csv(data, dtype=str, keep_default_na=False, na_values=[""])
        elif suffix == ".parquet":
            table = pd.read_parquet(data)
        else:
            table = pd.read_excel(data, sheet_name=0)
    except ImportError as exc:
        raise BuildError(f"reading {suffix} files needs a package that is missing: {exc}") from None
    except Exception as exc:  # pandas raises many kinds; all mean "not a readable table"
        raise BuildError(f"the table cannot be read: {exc}") from None
    table.columns = [str(c) for c in table.columns]
    return table


def default_id_column(columns: list[str]) -> str | None:
    """The column a table most likely keeps its ids in: ``id``, else one named ``*_id``
    (None: row numbers)."""
    names = [str(c) for c in columns]
    lowered = [n.lower() for n in names]
    if "id" in lowered:
        return names[lowered.index("id")]
    return next((n for n, low in zip(names, lowered, strict=True) if low.endswith("_id")), None)


def _environment() -> BoundedSandbox:
    # A sandbox: a template from a user must not reach Python internals, nor run without end.
    return BoundedSandbox(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False
    )


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    if isinstance(value, str) and not value.strip():
        return True
    try:
        return bool(pd.isna(value)) if not isinstance(value, list | dict) else False
    except (TypeError, ValueError):
        return False


def _plain(value: Any) -> Any:
    """A cell as a JSON-friendly Python value."""
    if _is_empty(value):
        return None
    if isinstance(value, pd.Timestamp | datetime | date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def template_columns(*templates: str) -> set[str]:
    """The names the templates use (columns, or ``row``).

    Raises:
        BuildError: a template with a syntax error (the message gives its line).
    """
    env = _environment()
    names: set[str] = set()
    for label, template in zip(("system prompt", "user template"), templates, strict=False):
        try:
            names |= meta.find_undeclared_variables(env.parse(template))
        except jinja2.TemplateSyntaxError as exc:
            raise BuildError(f"{label} line {exc.lineno}: {exc.message}") from None
    return names


def _row_columns(template_text: str) -> set[str]:
    """Columns named as ``row["name"]`` or ``row['name']`` (for empty-cell checks)."""
    return set(re.findall(r"""row\[\s*["']([^"']+)["']\s*\]""", template_text))


def _source_ids(table: pd.DataFrame, spec: BuildSpec) -> list[str]:
    if spec.id_column is None:
        return [str(i) for i in range(1, len(table) + 1)]
    if spec.id_column not in table.columns:
        raise BuildError(
            f"id column {spec.id_column!r} is not in the table; columns: {', '.join(table.columns)}"
        )
    return ["" if _is_empty(v) else str(_plain(v)).strip() for v in table[spec.id_column].tolist()]


def build_lines(
    table: pd.DataFrame, spec: BuildSpec, limit: int | None = None
) -> Iterator[tuple[int, dict[str, Any] | None, list[BuildProblem]]]:
    """Yields ``(row, line, problems)`` per data row (1-based); ``line`` None when left out.

    Raises:
        BuildError: missing columns, a template syntax error or an unknown id column.
    """
    if not spec.user_template.strip():
        raise BuildError("the user prompt template is empty")
    if not spec.task.strip():
        raise BuildError("the task name is empty; it starts every custom_id")
    names = template_columns(spec.system_prompt, spec.user_template)
    missing = sorted(names - set(table.columns) - {"row"})
    if missing:
        raise BuildError(
            f"the templates use {', '.join(repr(m) for m in missing)}, which the table does "
            f"not have; columns: {', '.join(table.columns)}"
        )
    used = (names - {"row"}) | _row_columns(spec.system_prompt + spec.user_template)
    env = _environment()
    system = env.from_string(spec.system_prompt) if spec.system_prompt.strip() else None
    user = env.from_string(spec.user_template)
    ids = _source_ids(table, spec)
    first_row_of: dict[str, int] = {}
    columns = list(table.columns)
    watch = RenderWatch()  # stops a row's render that runs too long
    slow_rows = 0
    try:
        for index, values in enumerate(table.itertuples(index=False, name=None)):
            row_no = index + 1
            if limit is not None and row_no > limit:
                return
            cells = {c: _plain(v) for c, v in zip(columns, values, strict=True)}
            problems = _row_problems(spec, row_no, ids[index], first_row_of, cells, used)
            if any(p.severity == "error" for p in problems):
                yield row_no, None, problems
                continue
            context = {c: ("" if v is None else v) for c, v in cells.items()}
            try:
                user_text = render(user, watch, **context, row=context).strip()
                system_text = render(system, watch, **context, row=context) if system else ""
            except Exception as exc:  # a user's template may fail in any way on one row
                reason = exc if isinstance(exc, jinja2.TemplateError) else _reason(exc)
                problems.append(BuildProblem(row_no, "error", f"template error: {reason}"))
                yield row_no, None, problems
                slow_rows += isinstance(exc, RenderTimeout)
                if slow_rows >= MAX_SLOW_ROWS:  # the template, not the rows: stop the build
                    raise BuildError(
                        f"the template ran past {watch.seconds:g} s on {slow_rows} rows; "
                        "make its loops smaller before building"
                    ) from None
                continue
            if not user_text:
                problems.append(BuildProblem(row_no, "error", "the user prompt renders empty"))
                yield row_no, None, problems
                continue
            line = _line(spec, ids[index], system_text.strip(), user_text)
            yield row_no, line, problems
    finally:
        watch.close()


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, RenderLimit) else f"{type(exc).__name__}: {exc}"


def _row_problems(
    spec: BuildSpec,
    row_no: int,
    source_id: str,
    first_row_of: dict[str, int],
    cells: dict[str, Any],
    used: set[str],
) -> list[BuildProblem]:
    """What keeps a row from becoming a line before its templates are rendered."""
    problems: list[BuildProblem] = []
    if not source_id:
        message = f"the id column {spec.id_column!r} is empty"
        problems.append(BuildProblem(row_no, "error", message))
    elif source_id in first_row_of:
        message = (
            f"id {source_id!r} repeats row {first_row_of[source_id]}; custom_ids must be unique"
        )
        problems.append(BuildProblem(row_no, "error", message))
    else:
        first_row_of[source_id] = row_no
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


def preview(table: pd.DataFrame, spec: BuildSpec, rows: int = 5) -> BuildResult:
    """The first ``rows`` rows rendered; the lines are in ``BuildResult.lines``."""
    result = BuildResult()
    for _row, line, problems in build_lines(table, spec, limit=rows):
        result.rows += 1
        result.problems += problems
        if line is not None:
            result.written += 1
            result.lines.append(line)
    return result


def build_file(table: pd.DataFrame, spec: BuildSpec, out: str | Path) -> BuildResult:
    """Renders every row and writes the lines to ``out`` (JSONL, UTF-8)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = BuildResult(path=str(out))
    with out.open("w", encoding="utf-8") as handle:
        for _row, line, problems in build_lines(table, spec):
            result.rows += 1
            if len(result.problems) < MAX_PROBLEMS:
                result.problems += problems
            if line is not None:
                result.written += 1
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    return result


def dry_run(table: pd.DataFrame, spec: BuildSpec) -> BuildResult:
    """Renders every row without writing anything: the problems and counts a build gives."""
    result = BuildResult()
    for _row, line, problems in build_lines(table, spec):
        result.rows += 1
        if len(result.problems) < MAX_PROBLEMS:
            result.problems += problems
        result.written += line is not None
    return result


def safe_file_name(name: str, default: str = "batch") -> str:
    """A file name for the uploads folder: letters, digits, ``-_.``; ends with .jsonl."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(name).stem).strip("-.") or default
    return f"{stem[:60]}.jsonl"
