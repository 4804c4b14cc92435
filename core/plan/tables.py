"""What every batch builder shares: reading a table, its cells and ids, and what a build
reports (rows written, problems by row).

The chat builder (:mod:`core.plan.builder`) and the embeddings builder
(:mod:`core.plan.embed_builder`) both read a table row by row, give each line a stable
``custom_id`` from an id column (or the row number), and name each row left out and why.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

import pandas as pd

TABLE_SUFFIXES = (".csv", ".parquet", ".xlsx")
ROW_NUMBERS = None  # a spec's id_column value meaning "use row numbers"
MAX_PROBLEMS = 10_000


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
class BuildResult:
    """What a build wrote (or would write) and what it left out, by row."""

    rows: int = 0
    written: int = 0  # table rows that went into lines
    problems: list[BuildProblem] = field(default_factory=list)
    path: str | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)  # filled by preview only
    line_count: int = 0  # lines written (one per row, or fewer when a line holds several)


class Step(NamedTuple):
    """What a builder made of one table row, in row order."""

    row: int  # the table row (1-based); 0: none, the last line of rows read before
    line: dict[str, Any] | None  # a line complete at this row
    problems: list[BuildProblem]
    kept: bool  # the row goes into a line (this one or one still to come)


def collect(
    steps: Iterable[Step], out: IO[str] | None = None, keep_lines: bool = False
) -> BuildResult:
    """Counts a builder's steps into a result; writes each line to ``out`` (JSONL) and, for
    a preview, keeps them in ``lines``. At most :data:`MAX_PROBLEMS` problems are kept."""
    result = BuildResult()
    for step in steps:
        if step.row:
            result.rows += 1
            result.written += step.kept
        if len(result.problems) < MAX_PROBLEMS:
            result.problems += step.problems
        if step.line is not None:
            result.line_count += 1
            if out is not None:
                out.write(json.dumps(step.line, ensure_ascii=False) + "\n")
            if keep_lines:
                result.lines.append(step.line)
    return result


MAX_TABLE_ROWS = 1_000_000  # a build reads at most this many data rows
MAX_TABLE_BYTES = 512 * 2**20  # and at most this much cell data (CSV text, Parquet buffers)
MAX_XLSX_XML_BYTES = 2 * 2**30  # an .xlsx sheet's XML, unpacked (markup and all)
# and at most this many cells that hold a value (a million rows of twenty columns): an
# .xlsx keeps strings apart from its cells, so its cells are counted, not their bytes
MAX_XLSX_CELLS = 20_000_000
CSV_CHUNK_ROWS = 100_000


class TableTooLarge(BuildError):
    """The table is over a build's row or size limit; the message says which and how to
    split it."""


def _too_many_rows(rows: int | None, limit: int) -> TableTooLarge:
    counted = f"{rows:,} rows" if rows is not None else f"more than {limit:,} rows"
    return TableTooLarge(
        f"the table has {counted}; a build reads at most {limit:,}. Split it into files of "
        f"at most {limit:,} rows (e.g. by date or by id range) and build one batch file "
        "from each."
    )


def _bytes(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB" if size >= 2**20 else f"{size:,} bytes"


def _too_big(size: int, limit: int, what: str = "cell data") -> TableTooLarge:
    return TableTooLarge(
        f"the table holds {_bytes(size)} of {what} or more; a build reads at most "
        f"{_bytes(limit)}. Split it into smaller "
        "files (fewer rows, or only the columns the batch needs) and build one batch file "
        "from each."
    )


def _read_csv(data: Any, size: int | None, max_rows: int, max_bytes: int) -> pd.DataFrame:
    if size is not None and size > max_bytes:  # a CSV's cells are at most its bytes
        raise _too_big(size, max_bytes)
    chunks, rows = [], 0
    reader = pd.read_csv(
        data, dtype=str, keep_default_na=False, na_values=[""], chunksize=CSV_CHUNK_ROWS
    )
    with reader:
        for chunk in reader:  # stops reading as soon as the limit is passed
            rows += len(chunk)
            if rows > max_rows:
                raise _too_many_rows(None, max_rows)
            chunks.append(chunk)
    return pd.concat(chunks, ignore_index=True) if len(chunks) != 1 else chunks[0]


def _read_parquet(data: Any, max_rows: int, max_bytes: int) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = pq.ParquetFile(data)
    if file.metadata.num_rows > max_rows:  # known from the footer: nothing else is read
        raise _too_many_rows(file.metadata.num_rows, max_rows)
    batches, size = [], 0
    for batch in file.iter_batches():  # row group by row group: memory stops at the budget
        size += batch.nbytes
        if size > max_bytes:
            raise _too_big(size, max_bytes)
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=file.schema_arrow).to_pandas()


_ROW = re.compile(rb"<(?:\w+:)?row\b[^>]*?(?<!/)>")  # a row that holds cells
_CELL = re.compile(rb"<(?:\w+:)?c\b[^>]*?(?<!/)>")  # a cell that holds a value


def _first_sheet(archive: Any) -> str:
    """The path of the workbook's first sheet (the one read) inside the .xlsx."""
    book = archive.read("xl/workbook.xml")
    first = re.search(rb"<(?:\w+:)?sheet\b[^>]*?\br:id=\"([^\"]+)\"", book)
    rels = archive.read("xl/_rels/workbook.xml.rels")
    for rel in re.finditer(rb"<(?:\w+:)?Relationship\b[^>]*>", rels):
        if first and b'Id="' + first.group(1) + b'"' in rel.group(0):
            target = re.search(rb'Target="([^"]+)"', rel.group(0))
            if target:
                path = target.group(1).decode().lstrip("/")
                return path if path.startswith("xl/") else f"xl/{path}"
    return "xl/worksheets/sheet1.xml"


def _check_xlsx_size(archive: Any, max_rows: int, max_cells: int) -> None:
    """Counts the first sheet's rows and cells in its raw XML as it unpacks, and refuses
    as soon as either passes its limit: before any cell is parsed (openpyxl takes about
    45 s and 500 MB to parse a million rows). The ``<dimension>`` a sheet records is never
    trusted: a writer may leave it out or get it wrong (``A1:B2`` over a million rows).

    Raises:
        TableTooLarge: more data rows than ``max_rows`` or more cells than ``max_cells``.
    """
    rows = cells = 0
    tail = b""
    with archive.open(_first_sheet(archive)) as sheet:
        while chunk := sheet.read(1 << 20):
            text = tail + chunk  # a tag cut between two reads is found whole here
            rows += len(_ROW.findall(text)) - len(_ROW.findall(tail))
            cells += len(_CELL.findall(text)) - len(_CELL.findall(tail))
            if rows - 1 > max_rows:  # less the header
                raise _too_many_rows(None, max_rows)
            if cells > max_cells:
                raise TableTooLarge(
                    f"the table has more than {max_cells:,} cells; a build reads at most "
                    f"{max_cells:,}. Split it into smaller files (fewer rows, or only the "
                    "columns the batch needs) and build one batch file from each."
                )
            tail = text[-256:]


def _read_xlsx(data: Any, max_rows: int, max_cells: int) -> pd.DataFrame:
    import zipfile

    with zipfile.ZipFile(data) as archive:  # the unpacked XML bounds what the cells hold
        xml = sum(i.file_size for i in archive.infolist() if i.filename.startswith("xl/"))
        if xml > MAX_XLSX_XML_BYTES:
            raise _too_big(xml, MAX_XLSX_XML_BYTES, "sheet XML")
        _check_xlsx_size(archive, max_rows, max_cells)
    if hasattr(data, "seek"):
        data.seek(0)
    table = pd.read_excel(data, sheet_name=0, nrows=max_rows + 1)  # stops at the limit
    if len(table) > max_rows:
        raise _too_many_rows(None, max_rows)
    return table


def read_table(
    source: str | Path | bytes,
    name: str | None = None,
    max_rows: int = MAX_TABLE_ROWS,
    max_bytes: int = MAX_TABLE_BYTES,
    max_cells: int = MAX_XLSX_CELLS,
) -> pd.DataFrame:
    """Reads a CSV, Parquet or Excel (.xlsx, first sheet) table, streamed: CSV in chunks,
    Parquet row group by row group, Excel row by row, each stopping at the limits.

    Args:
        source: a path, or the file's bytes (then ``name`` gives the suffix).
        name: the file name, when ``source`` is bytes.
        max_rows: the most data rows read (:data:`MAX_TABLE_ROWS`).
        max_bytes: the most cell data read (:data:`MAX_TABLE_BYTES`).
        max_cells: the most cells with a value an .xlsx may hold (:data:`MAX_XLSX_CELLS`).

    Raises:
        TableTooLarge: more rows or data than the limits; the message says how to split.
        BuildError: an unknown kind of file, or one that cannot be read.
    """
    label = name if name is not None else ("" if isinstance(source, bytes) else str(source))
    suffix = Path(label).suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise BuildError(f"use a {', '.join(TABLE_SUFFIXES)} file (got {suffix or 'no suffix'!r})")
    data = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        if suffix == ".csv":
            size = len(source) if isinstance(source, bytes) else Path(source).stat().st_size
            table = _read_csv(data, size, max_rows, max_bytes)
        elif suffix == ".parquet":
            table = _read_parquet(data, max_rows, max_bytes)
        else:
            table = _read_xlsx(data, max_rows, max_cells)
    except BuildError:
        raise
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


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")  # an ISO date, alone or starting a timestamp


def default_text_column(table: pd.DataFrame, id_column: str | None) -> str:
    """The column a template or an embedding most likely wants: of the text columns other
    than the ids, the one with the longest texts on average (never a timestamp or a code,
    which are short); the first other column when none holds text."""
    others = [str(c) for c in table.columns if str(c) != id_column] or [str(table.columns[0])]
    head = table.head(200)

    def mean_length(column: str) -> float:
        values = head[column]
        if values.dtype != object or values.map(lambda v: isinstance(v, str)).sum() == 0:
            return -1.0
        if values.map(lambda v: isinstance(v, str) and bool(_DATE.match(v))).all():
            return -1.0  # dates and times written as text
        return float(values.map(lambda v: len(v) if isinstance(v, str) else 0).mean())

    lengths = {column: mean_length(column) for column in others}
    best = max(others, key=lambda c: lengths[c])
    return best if lengths[best] >= 0 else others[0]


def is_empty(value: Any) -> bool:
    """True for a missing cell: None, NaN, NA, or text of only white space."""
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


def plain(value: Any) -> Any:
    """A cell as a JSON-friendly Python value (None when empty)."""
    if is_empty(value):
        return None
    if isinstance(value, pd.Timestamp | datetime | date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def source_ids(table: pd.DataFrame, id_column: str | None) -> list[str]:
    """Each row's id: the id column's value as text ("" when empty), or the row number.

    Raises:
        BuildError: the id column is not in the table.
    """
    if id_column is None:
        return [str(i) for i in range(1, len(table) + 1)]
    if id_column not in table.columns:
        raise BuildError(
            f"id column {id_column!r} is not in the table; columns: {', '.join(table.columns)}"
        )
    return ["" if is_empty(v) else str(plain(v)).strip() for v in table[id_column].tolist()]


def id_problems(
    id_column: str | None, row_no: int, source_id: str, first_row_of: dict[str, int]
) -> list[BuildProblem]:
    """An empty or repeated id (``first_row_of`` records each id's first row as rows go)."""
    if not source_id:
        return [BuildProblem(row_no, "error", f"the id column {id_column!r} is empty")]
    if source_id in first_row_of:
        message = (
            f"id {source_id!r} repeats row {first_row_of[source_id]}; custom_ids must be unique"
        )
        return [BuildProblem(row_no, "error", message)]
    first_row_of[source_id] = row_no
    return []


def safe_file_name(name: str, default: str = "batch") -> str:
    """A file name for the uploads folder: letters, digits, ``-_.``; ends with .jsonl."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(name).stem).strip("-.") or default
    return f"{stem[:60]}.jsonl"


def free_file_name(folder: Path, name: str) -> str:
    """``name`` made safe (:func:`safe_file_name`), or, when a file of that name is in
    ``folder`` already, the first free ``<stem>-2.jsonl``, ``<stem>-3.jsonl``, ...: the name
    a save offers instead of overwriting."""
    name = safe_file_name(name)
    stem = Path(name).stem
    number = 1
    while (folder / name).exists():
        number += 1
        name = f"{stem}-{number}.jsonl"
    return name
