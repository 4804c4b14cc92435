"""Build a ``/v1/rerank`` batch from a table of queries and documents.

Each row is one (query, document) pair; the rows of one query (the same text in the query
column, in the table's order) become one line: ``query``, its ``documents`` and ``top_n``.
A label column (numbers, 0 for not relevant) goes into ``metadata.relevance``, one label per
document, so Results and Dashboards give the ranking's NDCG@k and MRR
(:mod:`core.store.ranking`). ``custom_id`` is ``{task}:{n}``, the query's place among the
queries; the metadata keeps the rows' ids (``source_ids``) to join results back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd

from core.check.scoring import LABELS, MAX_DOCUMENTS
from core.endpoints import RERANK_URL
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


@dataclass
class RerankSpec:
    """What to build: the query and document columns, and optionally a label column."""

    query_column: str
    document_column: str
    label_column: str | None = None
    id_column: str | None = ROW_NUMBERS
    task: str = "rerank"
    model: str = "rerank-model"
    top_n: int = 0
    job_id: str = ""


def _validate(table: pd.DataFrame, spec: RerankSpec) -> None:
    for column in (spec.query_column, spec.document_column, spec.label_column):
        if column is not None and column not in table.columns:
            raise BuildError(
                f"column {column!r} is not in the table; columns: {', '.join(table.columns)}"
            )
    if not spec.task.strip():
        raise BuildError("the task name is empty; it starts every custom_id")
    if spec.top_n < 0:
        raise BuildError(f"top_n is 0 (all) or more, not {spec.top_n}")


def _label(value: Any) -> float | None:
    """A relevance label: a number of at least 0 (a column with one text cell is read as
    text, so numbers written as text count too), else None."""
    value = plain(value)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        value = int(value) if value.is_integer() else value
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        return None
    return value


def rerank_lines(
    table: pd.DataFrame, spec: RerankSpec, max_lines: int | None = None
) -> Iterator[Step]:
    """Yields a :class:`Step` per data row, then one per query with its line (at most
    ``max_lines`` of them, for a preview).

    Raises:
        BuildError: an unknown column, an empty task, or a negative ``top_n``.
    """
    _validate(table, spec)
    ids = source_ids(table, spec.id_column)
    queries, documents = table[spec.query_column].tolist(), table[spec.document_column].tolist()
    labels = table[spec.label_column].tolist() if spec.label_column else None
    groups: dict[str, list[tuple[str, str, Any]]] = {}  # query -> (row id, document, label)
    first_row_of: dict[str, int] = {}
    for index in range(len(table)):
        row_no = index + 1
        problems = id_problems(spec.id_column, row_no, ids[index], first_row_of)
        for column, value in ((spec.query_column, queries[index]),
                              (spec.document_column, documents[index])):  # fmt: skip
            if is_empty(value):
                problems.append(BuildProblem(row_no, "error", f"empty cell in {column!r}"))
        label = _label(labels[index]) if labels is not None else None
        if labels is not None and label is None:
            message = f"the label in {spec.label_column!r} is not a number of at least 0"
            problems.append(BuildProblem(row_no, "error", message))
        query = str(plain(queries[index]))
        if not problems and len(groups.get(query, ())) >= MAX_DOCUMENTS:
            message = f"the query has more than {MAX_DOCUMENTS:,} documents, a line's limit"
            problems.append(BuildProblem(row_no, "error", message))
        if problems:
            last = problems[-1]
            problems[-1] = BuildProblem(row_no, last.severity, f"{last.message}; row left out")
            yield Step(row_no, None, problems, False)
            continue
        groups.setdefault(query, []).append((ids[index], str(plain(documents[index])), label))
        yield Step(row_no, None, [], True)
    for number, (query, rows) in enumerate(groups.items(), start=1):
        if max_lines is not None and number > max_lines:
            return
        yield Step(0, _line(spec, number, query, rows), [], False)


def _line(spec: RerankSpec, number: int, query: str, rows: list[tuple[str, str, Any]]) -> dict:
    metadata: dict[str, Any] = {"task": spec.task, "source_ids": [r[0] for r in rows]}
    if spec.label_column:
        metadata[LABELS] = [r[2] for r in rows]
    if spec.job_id:
        metadata["job_id"] = spec.job_id
    body: dict[str, Any] = {
        "model": spec.model,
        "query": query,
        "documents": [r[1] for r in rows],
        "metadata": metadata,
    }
    if spec.top_n:
        body["top_n"] = spec.top_n
    return {"custom_id": f"{spec.task}:{number}", "method": "POST", "url": RERANK_URL, "body": body}
