"""Indexes the human-work files (``core.human.files``) into DuckDB, and migrates old stores.

Each file is read from where the last sync stopped (``human_files``: byte offset and line
count), so a sync after a save reads one line, and a new database reads every file whole:
that is the rebuild. A file that shrank was replaced (say, restored from a backup) and is
read again whole. Lines that cannot be read are kept in ``human_file_problems`` (file,
line, why) for the pages to name; the lines around them load as usual.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa

from core.human.files import (
    ADJUDICATIONS,
    FILES,
    LABELS,
    PREFERENCES,
    SAMPLES,
    AdjudicationRecord,
    LabelRecord,
    PreferenceRecord,
    SampleDeleted,
    SampleItem,
    SampleRecord,
    append,
    read_from,
    to_disk,
)

# The index tables each file fills (cleared before the file is read again whole).
TABLES: dict[str, tuple[str, ...]] = {
    LABELS: ("reviews", "review_history"),
    PREFERENCES: ("preferences",),
    SAMPLES: ("sample_items", "samples"),
    ADJUDICATIONS: ("adjudications",),
}
FEW = 8  # up to this many new lines are written row by row, more as one table


Offsets = dict[str, tuple[int, int]]  # file name -> (bytes read, lines read)


def sync(cur: duckdb.DuckDBPyConnection, folder: Path, read: Offsets | None = None) -> Offsets:
    """Brings every human-work file's new lines into the index (one transaction per file).

    ``read`` is how far each file was read, as the last sync returned it (None: from the
    index). A save's sync then costs a stat per file and no query when another session's
    sync already indexed its line. Returns the offsets after this sync.
    """
    if read is None:
        read = {f: (o, n) for f, o, n in cur.execute("SELECT * FROM human_files").fetchall()}
    read = dict(read)
    for name in FILES:
        path = folder / name
        size = path.stat().st_size if path.exists() else 0
        if name in read and read[name][0] == size:
            continue  # nothing new (the common case: a stat, no transaction)
        if size:  # never index a line a power cut could still take back
            to_disk(path)
        cur.execute("BEGIN")
        try:
            read[name] = _sync_file(cur, folder, path, read.get(name))
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
    return read


def _sync_file(
    cur: duckdb.DuckDBPyConnection, folder: Path, path: Path, row: tuple[int, int] | None
) -> tuple[int, int]:
    """Reads one file from where the last sync stopped (``row``: byte offset and lines;
    None when it was never read into this index); returns how far it read."""
    name = path.name
    size = path.stat().st_size if path.exists() else 0
    if row is None:  # a new index (or one made before these files): read the file whole
        if size == 0 and _has_rows(cur, name):
            _migrate(cur, folder, name)  # labels that lived only in DuckDB go to the file once
            size = path.stat().st_size
        offset, lines = 0, 0
        _clear(cur, name)
        cur.execute("INSERT INTO human_files VALUES (?, 0, 0)", [name])
    else:
        offset, lines = row
        if size == offset:
            return offset, lines
        if size < offset or not _line_ends_at(path, offset):
            # Replaced or edited by hand (appends never shrink a file or move a line's end):
            # read it again whole.
            offset, lines = 0, 0
            _clear(cur, name)
    while True:  # a piece at a time, each applied before the next is read
        chunk = read_from(path, offset, lines)
        if chunk.offset == offset and not chunk.problems:
            return offset, lines  # nothing (more) to read
        if name == LABELS:
            _apply_labels(cur, [(n, r) for n, r in chunk.records if isinstance(r, LabelRecord)])
        elif name == ADJUDICATIONS:
            _apply_adjudications(
                cur, [(n, r) for n, r in chunk.records if isinstance(r, AdjudicationRecord)]
            )
        elif name == PREFERENCES:
            _apply_preferences(
                cur, [(n, r) for n, r in chunk.records if isinstance(r, PreferenceRecord)]
            )
        else:
            samples = [
                (n, r) for n, r in chunk.records if isinstance(r, SampleRecord | SampleDeleted)
            ]
            _apply_samples(cur, samples)
        for line_no, problem in chunk.problems:
            cur.execute(
                "INSERT OR REPLACE INTO human_file_problems VALUES (?, ?, ?)",
                [name, line_no, problem],
            )
        cur.execute(  # an UPDATE costs a fraction of an INSERT OR REPLACE here
            "UPDATE human_files SET byte_offset = ?, lines = ? WHERE file = ?",
            [chunk.offset, chunk.lines, name],
        )
        if chunk.offset == offset:
            return offset, lines
        offset, lines = chunk.offset, chunk.lines


def _line_ends_at(path: Path, offset: int) -> bool:
    """Whether the byte before ``offset`` ends a line (where the last read stopped)."""
    if offset == 0:
        return True
    with path.open("rb") as handle:
        handle.seek(offset - 1)
        return handle.read(1) == b"\n"


def _has_rows(cur: duckdb.DuckDBPyConnection, name: str) -> bool:
    return any(cur.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in TABLES[name])


def _clear(cur: duckdb.DuckDBPyConnection, name: str) -> None:
    for table in TABLES[name]:
        cur.execute(f"DELETE FROM {table}")
    cur.execute("DELETE FROM human_file_problems WHERE file = ?", [name])


def _apply_labels(cur: duckdb.DuckDBPyConnection, found: list[tuple[int, LabelRecord]]) -> None:
    if not found:
        return
    fields = (
        "job_id", "custom_id", "reviewer", "verdict", "score", "comment", "corrected_answer",
        "sample_id",
    )  # fmt: skip
    columns = ", ".join((*fields, "answers", "tags"))
    if len(found) <= FEW:  # saves: plain statements cost a fraction of a scan of a table
        # One statement of each kind for the lines that came together (saves of several
        # sessions, indexed by whichever took the writer first), not one per line.
        latest = {(r.job_id, r.custom_id, r.reviewer): r for _, r in found}  # last line wins
        row = "(" + ", ".join("?" * (len(fields) + 3)) + ")"  # the fields, answers, tags, time
        cur.execute(
            f"INSERT INTO review_history ({columns}, saved_at, line_no) VALUES "
            + ", ".join([row[:-1] + ", ?)"] * len(found)),
            [v for n, r in found for v in (*_values(r, fields), n)],
        )
        cur.execute(  # reviews has no key (schema.py): the old label goes first
            "DELETE FROM reviews WHERE "
            + " OR ".join(["(job_id = ? AND custom_id = ? AND reviewer = ?)"] * len(latest)),
            [v for key in latest for v in key],
        )
        cur.execute(
            f"INSERT INTO reviews ({columns}, updated_at) VALUES " + ", ".join([row] * len(latest)),
            [v for r in latest.values() for v in _values(r, fields)],
        )
        return
    batch = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            **{f: [getattr(r, f) for _, r in found] for f in fields},
            "score": pa.array([r.score for _, r in found], pa.int32()),
            "answers": pa.array([_answers(r) for _, r in found], pa.string()),
            "tags": pa.array([r.tags for _, r in found], pa.list_(pa.string())),
            "saved_at": pa.array([r.at for _, r in found], pa.timestamp("us", tz="UTC")),
            "line_no": [n for n, _ in found],
        }
    )
    cur.execute(
        f"INSERT INTO review_history BY NAME SELECT {columns}, saved_at, line_no FROM batch"
    )
    cur.execute(
        "DELETE FROM reviews USING batch b WHERE reviews.job_id = b.job_id "
        "AND reviews.custom_id = b.custom_id AND reviews.reviewer = b.reviewer"
    )
    cur.execute(
        f"""
        INSERT INTO reviews BY NAME
        SELECT {columns}, saved_at AS updated_at FROM batch
        QUALIFY row_number() OVER (PARTITION BY job_id, custom_id, reviewer
                                   ORDER BY line_no DESC) = 1
        """
    )


def _values(r: LabelRecord, fields: tuple[str, ...]) -> list:
    """A label's column values in the order of ``fields``, then answers, tags and time."""
    return [*(getattr(r, f) for f in fields), _answers(r), r.tags, r.at]


def _answers(r: LabelRecord) -> str | None:
    """A label's schema answers as JSON text (NULL without any)."""
    return json.dumps(r.answers, ensure_ascii=False) if r.answers else None


def _apply_adjudications(
    cur: duckdb.DuckDBPyConnection, found: list[tuple[int, AdjudicationRecord]]
) -> None:
    """Every adjudication as saved (an item's latest is its final label: line_no orders)."""
    if not found:
        return
    batch = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            **{
                f: pa.array([getattr(r, f) for _, r in found], pa.string())
                for f in ("job_id", "custom_id", "verdict", "note", "sample_id")
            },
            "adjudicator": pa.array([r.by for _, r in found], pa.string()),
            "saved_at": pa.array([r.at for _, r in found], pa.timestamp("us", tz="UTC")),
            "line_no": [n for n, _ in found],
        }
    )
    cur.execute("INSERT INTO adjudications BY NAME SELECT * FROM batch")


def _apply_preferences(
    cur: duckdb.DuckDBPyConnection, found: list[tuple[int, PreferenceRecord]]
) -> None:
    if not found:
        return
    fields = (
        "comparison", "key", "reviewer", "job_a", "custom_id_a", "job_b", "custom_id_b", "choice",
    )  # fmt: skip
    batch = pa.table(  # noqa: F841 (read by DuckDB by name)
        {
            **{f: pa.array([getattr(r, f) for _, r in found], pa.string()) for f in fields},
            "saved_at": pa.array([r.at for _, r in found], pa.timestamp("us", tz="UTC")),
            "line_no": [n for n, _ in found],
        }
    )
    cur.execute(
        f"""
        INSERT OR REPLACE INTO preferences BY NAME
        SELECT {", ".join(fields)}, saved_at AS updated_at FROM batch
        QUALIFY row_number() OVER (PARTITION BY comparison, key, reviewer
                                   ORDER BY line_no DESC) = 1
        """
    )


def _apply_samples(cur: duckdb.DuckDBPyConnection, found: list) -> None:
    """Saves and deletes samples in file order (a definition this version cannot read is
    named when the sample is opened: ``core.store.samples.get_sample``)."""
    for _, record in found:
        cur.execute("DELETE FROM sample_items WHERE sample_id = ?", [record.sample_id])
        if isinstance(record, SampleDeleted):
            cur.execute("DELETE FROM samples WHERE sample_id = ?", [record.sample_id])
            continue
        cur.execute(
            "INSERT OR REPLACE INTO samples (sample_id, name, created_at, definition, size) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                record.sample_id,
                record.name,
                record.at,
                json.dumps(record.definition),
                len(record.items),
            ],
        )
        items = pa.table(  # noqa: F841 (read by DuckDB by name)
            {
                "sample_id": [record.sample_id] * len(record.items),
                "position": list(range(1, len(record.items) + 1)),
                "job_id": [i.job_id for i in record.items],
                "custom_id": [i.custom_id for i in record.items],
                "stratum": pa.array([i.stratum for i in record.items], pa.string()),
            }
        )
        cur.execute("INSERT INTO sample_items BY NAME SELECT * FROM items")


def _migrate(cur: duckdb.DuckDBPyConnection, folder: Path, name: str) -> None:
    """Writes what an index made before the human-work files holds of one kind to its file
    (a label's history before then was never kept: its latest verdict is written)."""
    if name == LABELS:
        rows = cur.execute(
            "SELECT job_id, custom_id, reviewer, verdict, score, coalesce(tags, []), comment, "
            "corrected_answer, sample_id, coalesce(updated_at, now()) FROM reviews "
            "ORDER BY updated_at, job_id, custom_id, reviewer"
        ).fetchall()
        for r in rows:
            append(folder, LabelRecord(
                job_id=r[0], custom_id=r[1], reviewer=r[2], verdict=r[3], score=r[4],
                tags=list(r[5]), comment=r[6], corrected_answer=r[7], sample_id=r[8], at=r[9],
            ))  # fmt: skip
    elif name == PREFERENCES:
        rows = cur.execute(
            "SELECT comparison, key, reviewer, job_a, custom_id_a, job_b, custom_id_b, choice, "
            "coalesce(updated_at, now()) FROM preferences ORDER BY updated_at, comparison, key"
        ).fetchall()
        for r in rows:
            append(folder, PreferenceRecord(
                comparison=r[0], key=r[1], reviewer=r[2], job_a=r[3], custom_id_a=r[4],
                job_b=r[5], custom_id_b=r[6], choice=r[7], at=r[8],
            ))  # fmt: skip
    elif name == SAMPLES:
        samples = cur.execute(
            "SELECT sample_id, name, definition, coalesce(created_at, now()) FROM samples "
            "ORDER BY created_at, sample_id"
        ).fetchall()
        for sample_id, sample_name, definition, created in samples:
            items = cur.execute(
                "SELECT job_id, custom_id, stratum FROM sample_items WHERE sample_id = ? "
                "ORDER BY position",
                [sample_id],
            ).fetchall()
            if not items:
                continue
            append(folder, SampleRecord(
                sample_id=sample_id, name=sample_name or sample_id, at=created,
                definition=json.loads(definition),
                items=[SampleItem(job_id=j, custom_id=c, stratum=s) for j, c, s in items],
            ))  # fmt: skip


def problems(cur: duckdb.DuckDBPyConnection) -> list[str]:
    """Every skipped line of the human-work files, as "file, line N: why"."""
    rows = cur.execute(
        "SELECT file, line_no, problem FROM human_file_problems ORDER BY file, line_no"
    ).fetchall()
    return [
        f"{file}, line {line_no}: {problem}" if line_no else f"{file}: {problem}"
        for file, line_no, problem in rows
    ]
