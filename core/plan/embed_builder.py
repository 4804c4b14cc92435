"""Build a ``/v1/embeddings`` batch from one column of a table.

Each row's cell in the chosen column is one input text. A line holds one row (``input`` a
string) or up to ``rows_per_line`` rows (``input`` a list of strings, the i-th vector of
the result being the i-th row's): fewer, longer requests cost less per line to read and
check, and the engine embeds them all the same. ``custom_id`` is ``{task}:{id}``, or
``{task}:{first id}..{last id}`` for a line of several rows, with the ids from the id
column (or row numbers) as the chat builder gives them.

Empty cells are left out, each named by row: OpenAI's API refuses an empty input, and a
vector of nothing is no one's text. ``body.metadata`` (on by default) carries ``task``, the
row's ``source_id`` (``source_ids`` for several rows), ``job_id`` and any columns chosen
for it, each a list with one value per input on a line of several rows; the Results map
colours points by them. vLLM ignores the field; OpenAI's embeddings API does not know it
(turn it off for a file meant for OpenAI).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd

from core.endpoints import EMBEDDINGS_URL
from core.plan.tables import (
    ROW_NUMBERS,
    BuildError,
    BuildProblem,
    Step,
    id_problems,
    is_empty,
    plain,
    source_ids,
)

ENCODING_FORMATS = ("float", "base64")
# OpenAI takes at most 2,048 inputs in one embeddings request.
MAX_ROWS_PER_LINE = 2048
DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"


@dataclass
class EmbedSpec:
    """What to build: the column whose cells are embedded, and how lines are made."""

    column: str
    id_column: str | None = ROW_NUMBERS
    task: str = "embed"
    model: str = DEFAULT_EMBEDDING_MODEL
    rows_per_line: int = 1
    encoding_format: Literal["float", "base64"] = "float"
    job_id: str = ""
    metadata: bool = True  # body.metadata: task, source ids, job_id, metadata_columns
    metadata_columns: list[str] = field(default_factory=list)


def _validate(table: pd.DataFrame, spec: EmbedSpec) -> None:
    if spec.column not in table.columns:
        raise BuildError(
            f"column {spec.column!r} is not in the table; columns: {', '.join(table.columns)}"
        )
    if not spec.task.strip():
        raise BuildError("the task name is empty; it starts every custom_id")
    if not 1 <= spec.rows_per_line <= MAX_ROWS_PER_LINE:
        raise BuildError(
            f"rows per line must be 1 to {MAX_ROWS_PER_LINE:,}, not {spec.rows_per_line}"
        )
    if spec.encoding_format not in ENCODING_FORMATS:
        raise BuildError(f"encoding_format is one of {', '.join(ENCODING_FORMATS)}")
    missing = [c for c in spec.metadata_columns if c not in table.columns]
    if missing:
        raise BuildError(f"metadata columns {', '.join(map(repr, missing))} are not in the table")


def embedding_lines(
    table: pd.DataFrame, spec: EmbedSpec, max_lines: int | None = None
) -> Iterator[Step]:
    """Yields a :class:`Step` per data row, and at the end of the table one without a row
    when the last line is still open; stops once ``max_lines`` lines are made (a preview).

    Raises:
        BuildError: an unknown column, an empty task, or rows per line out of range.
    """
    _validate(table, spec)
    ids = source_ids(table, spec.id_column)
    texts = table[spec.column].tolist()
    extra = {c: table[c].tolist() for c in spec.metadata_columns}
    first_row_of: dict[str, int] = {}
    pending: list[int] = []  # indexes of the rows of the line being filled
    made = 0
    for index in range(len(table)):
        if max_lines is not None and made >= max_lines:
            return  # a preview shows whole lines only
        row_no = index + 1
        problems = id_problems(spec.id_column, row_no, ids[index], first_row_of)
        if is_empty(texts[index]):
            problems.append(
                BuildProblem(row_no, "error", f"empty cell in {spec.column!r}; row left out")
            )
        if problems:
            yield Step(row_no, None, problems, False)
            continue
        pending.append(index)
        line = None
        if len(pending) == spec.rows_per_line:
            line, pending = _line(spec, pending, ids, texts, extra), []
            made += 1
        yield Step(row_no, line, [], True)
    if pending:
        yield Step(0, _line(spec, pending, ids, texts, extra), [], False)


def _text(value: Any) -> str:
    value = plain(value)
    return value if isinstance(value, str) else str(value)


def _line(
    spec: EmbedSpec,
    rows: list[int],
    ids: list[str],
    texts: list[Any],
    extra: dict[str, list[Any]],
) -> dict[str, Any]:
    inputs = [_text(texts[i]) for i in rows]
    names = [ids[i] for i in rows]
    single = spec.rows_per_line == 1
    body: dict[str, Any] = {
        "model": spec.model,
        "input": inputs[0] if single else inputs,
        "encoding_format": spec.encoding_format,
    }
    if spec.metadata:
        metadata: dict[str, Any] = {"task": spec.task}
        if single:
            metadata["source_id"] = names[0]
        else:
            metadata["source_ids"] = names
        if spec.job_id:
            metadata["job_id"] = spec.job_id
        for column, values in extra.items():
            cells = [plain(values[i]) for i in rows]
            metadata[column] = cells[0] if single else cells
        body["metadata"] = metadata
    key = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
    custom_id = f"{spec.task}:{key}"
    return {"custom_id": custom_id, "method": "POST", "url": EMBEDDINGS_URL, "body": body}
