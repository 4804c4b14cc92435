"""The files people's work is written to first: one append-only JSONL per kind.

A review label, a preference or a sample is appended (flushed and fsynced) to its file in
``data/human/`` before the DuckDB index gets its row, as a job's ``rules.yaml`` is written
before its outcomes: the files are the truth and the index is rebuilt from them. Nothing
is ever rewritten, so a changed verdict leaves its earlier one in the file (who changed it
and when). A line that does not parse or validate is named (file and line) and skipped.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

from core.human.questions import Answer, LabelSchema, label_name_problem
from core.schemas import Model, problems_of

LABELS = "labels.jsonl"
PREFERENCES = "preferences.jsonl"
SAMPLES = "samples.jsonl"
ADJUDICATIONS = "adjudications.jsonl"
FILES = (LABELS, PREFERENCES, SAMPLES, ADJUDICATIONS)  # indexed in DuckDB (core.store.human_index)
LABEL_SETS = "label_sets.jsonl"  # a few lines, read from the file (core.human.label_sets)
QUEUES = "queues.jsonl"  # the queues over samples and their skips (core.human.queues)
LABEL_SCHEMAS = "label_schemas.jsonl"  # samples' questions (core.human.label_schemas)
OWNERS = "sample_owners.jsonl"  # who owns each sample (core.human.owners)

VERDICTS = ("pass", "fail", "unsure")


def _label_name(name: str) -> str:
    problem = label_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


LabelName = Annotated[str, AfterValidator(_label_name)]


def now_utc() -> datetime:
    return datetime.now(UTC)


class LabelRecord(Model):
    """One reviewer's label of one result as saved at ``at`` (the latest line wins)."""

    kind: Literal["label"] = "label"
    job_id: str
    custom_id: str
    reviewer: str = Field(min_length=1)
    verdict: LabelName  # pass, fail, unsure, or one of the reviewer's own labels
    score: int | None = Field(None, ge=1, le=5)
    tags: list[str] = Field(default_factory=list)
    comment: str | None = None
    corrected_answer: str | None = None
    sample_id: str | None = None
    # the sample's schema's choice and rating answers, by question title (none before them)
    answers: dict[str, Answer] = Field(default_factory=dict)
    at: datetime


class AdjudicationRecord(Model):
    """An owner's final label of a result whose reviewers differ (the latest line wins;
    the reviewers' own labels stay as they were)."""

    kind: Literal["adjudication"] = "adjudication"
    job_id: str
    custom_id: str
    verdict: LabelName
    by: str = Field(min_length=1)
    note: str | None = None
    sample_id: str | None = None
    at: datetime


class PreferenceRecord(Model):
    """A reviewer's choice between two answers of a comparison (the latest line wins)."""

    kind: Literal["preference"] = "preference"
    comparison: str
    key: str
    reviewer: str = Field(min_length=1)
    job_a: str
    custom_id_a: str | None = None
    job_b: str
    custom_id_b: str | None = None
    choice: Literal["A", "B", "tie"]
    at: datetime


class LabelSetRecord(Model):
    """A reviewer's own labels beyond pass/fail/unsure, as set at ``at`` (the latest line
    of a reviewer wins; an empty list clears them)."""

    kind: Literal["label_set"] = "label_set"
    reviewer: str = Field(min_length=1)
    labels: list[LabelName] = Field(default_factory=list, max_length=9)
    at: datetime


class QueueRecord(Model):
    """A sample's queue as an owner set it at ``at`` (the latest line of a sample wins): who
    reviews it, and how many of them review each item."""

    kind: Literal["queue"] = "queue"
    sample_id: str
    reviewers: list[str] = Field(min_length=1)
    overlap: int = Field(ge=1)
    by: str = Field(min_length=1)
    at: datetime


class SkipRecord(Model):
    """A reviewer put an item of their queue off until the rest is done."""

    kind: Literal["skip"] = "skip"
    sample_id: str
    reviewer: str = Field(min_length=1)
    job_id: str
    custom_id: str
    at: datetime


class LabelSchemaRecord(Model):
    """A sample's label schema (questions and guidelines) as its owner set it at ``at``
    (the latest line of a sample wins; an empty schema is the default label again)."""

    kind: Literal["label_schema"] = "label_schema"
    sample_id: str
    label_schema: LabelSchema
    by: str = Field(min_length=1)
    at: datetime


class OwnerRecord(Model):
    """A sample's owner as recorded at ``at`` (the latest line of a sample wins): who drew
    it where sign-in is on, or whom an admin named (``by``)."""

    kind: Literal["owner"] = "owner"
    sample_id: str
    owner: str = Field(min_length=1, max_length=320)
    by: str = Field(min_length=1)
    at: datetime


class SampleItem(Model):
    job_id: str
    custom_id: str
    stratum: str | None = None


class SampleRecord(Model):
    """A saved sample: its definition (``core.store.samples.SampleDefinition``'s JSON) and
    its items in review order."""

    kind: Literal["sample"] = "sample"
    sample_id: str
    name: str = Field(min_length=1)
    definition: dict[str, Any]
    items: list[SampleItem] = Field(min_length=1)
    at: datetime


class SampleDeleted(Model):
    kind: Literal["sample_deleted"] = "sample_deleted"
    sample_id: str
    at: datetime


Record = Annotated[
    LabelRecord
    | PreferenceRecord
    | SampleRecord
    | SampleDeleted
    | LabelSetRecord
    | AdjudicationRecord
    | QueueRecord
    | SkipRecord
    | LabelSchemaRecord
    | OwnerRecord,
    Field(discriminator="kind"),
]
_RECORD: TypeAdapter[Record] = TypeAdapter(Record)
# Which kinds each file may hold: a record of another kind in a file is foreign there.
KINDS: dict[str, tuple[str, ...]] = {
    LABELS: ("label",),
    PREFERENCES: ("preference",),
    SAMPLES: ("sample", "sample_deleted"),
    LABEL_SETS: ("label_set",),
    ADJUDICATIONS: ("adjudication",),
    QUEUES: ("queue", "skip"),
    LABEL_SCHEMAS: ("label_schema",),
    OWNERS: ("owner",),
}


def append(
    folder: Path,
    record: LabelRecord
    | PreferenceRecord
    | SampleRecord
    | SampleDeleted
    | LabelSetRecord
    | AdjudicationRecord
    | QueueRecord
    | SkipRecord
    | LabelSchemaRecord
    | OwnerRecord,
    *,
    durable: bool = True,
) -> None:
    """Appends one record to its file, durably (fsynced) before returning unless
    ``durable`` is False: then the line is in the file (a crash of this process keeps it)
    and reaches the disk at the next index sync, which fsyncs a file before it reads its
    new lines (:func:`to_disk`), or at the next durable append.

    An exclusive ``flock`` keeps two processes' lines whole. If the file ends inside a line
    (a writer died mid-write), a newline first closes that torn line, which readers then
    name and skip, instead of gluing it to this record. The fsync comes after the lock is
    let go (it flushes every line written so far, this one too): saves made at once then
    wait for the disk together instead of in turn, and their lines are indexed together.
    """
    name = next(file for file, kinds in KINDS.items() if record.kind in kinds)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    new = not path.exists()
    data = (record.model_dump_json() + "\n").encode("utf-8")
    with path.open("a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            size = os.fstat(handle.fileno()).st_size
            if size and os.pread(handle.fileno(), 1, size - 1) != b"\n":
                data = b"\n" + data
            handle.write(data)
            handle.flush()
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
        if durable:
            os.fsync(handle.fileno())
    if new:  # the new file's name is durable too
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def to_disk(path: Path) -> None:
    """Fsyncs a human-work file: lines appended without ``durable`` reach the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Chunk:
    """What :func:`read_from` found past an offset."""

    records: list[tuple[int, Record]]  # (line number, record)
    problems: list[tuple[int, str]]  # (line number, why it was skipped)
    offset: int  # after the last complete line read
    lines: int  # complete lines up to ``offset``


READ_BYTES = 16 << 20  # read a file a piece at a time: a rebuild of a long one stays small


def read_from(path: Path, offset: int, lines: int, limit: int = READ_BYTES) -> Chunk:
    """The complete lines of ``path`` past ``offset`` (``lines`` lines before it), parsed;
    about ``limit`` bytes of them (more when a single line is longer): call again from the
    returned offset until it no longer moves.

    A line still being written (no newline yet) is left for the next read. A file that
    cannot be read at all (a folder in its place, no permission) is one problem, line 0.
    """
    if not path.exists():
        return Chunk([], [], offset, lines)
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(limit)
            while data and b"\n" not in data:  # a line longer than the limit
                more = handle.read(limit)
                if not more:
                    break
                data += more
    except OSError as exc:
        return Chunk([], [(0, f"cannot be read: {exc.strerror or exc}")], offset, lines)
    end = data.rfind(b"\n") + 1
    records: list[tuple[int, Record]] = []
    problems: list[tuple[int, str]] = []
    line_no = lines
    allowed = KINDS.get(path.name, ())
    for raw in data[:end].split(b"\n")[:-1]:  # only "\n" ends a line, as append writes it
        line_no += 1
        if not raw.strip():
            continue
        try:
            record = _RECORD.validate_json(raw)
        except ValidationError as exc:
            problems.append((line_no, "; ".join(problems_of(exc))[:300]))
            continue
        if record.kind not in allowed:
            problems.append((line_no, f"a {record.kind} record does not belong in {path.name}"))
            continue
        records.append((line_no, record))
    return Chunk(records, problems, offset + end, line_no)
