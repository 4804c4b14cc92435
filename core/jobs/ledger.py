"""Every request's final result, read from a job folder: reconcile, verify, combine, rerun.

A job keeps OpenAI's layout: successes in ``output.jsonl``, failures in ``errors.jsonl``.
A request may fail and later succeed on a retry, so ``errors.jsonl`` is a history; a
request's final result is its success line if it has one, else its latest error line.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from core.jobs.folder import JobFolder
from core.jobs.output_file import (
    CHAIN_FIELD,
    CorruptLine,
    chain_hash,
    complete_lines,
    complete_spans,
    split_chain,
)
from core.recent import Recent

BOM = b"\xef\xbb\xbf"

# Failures a retry cannot change: the same input fails the same way (a line the check
# refused; a request the engine refused, e.g. a prompt beyond the model's context).
NEVER_RETRIED = ("invalid_request", "engine_rejected")


class _Line(msgspec.Struct):
    """What the ledger reads of a line: its ``custom_id`` (and a result's ``error``); the
    rest is skipped by the decoder without being built."""

    custom_id: Any = None
    error: Any = None


_decode_line = msgspec.json.Decoder(_Line).decode


def request_id(raw: bytes) -> str | None:
    """A request line's ``custom_id`` as the check reads it: a non-blank string, else None
    (the check reports such a line; the ledger counts it as ``line-N``)."""
    try:
        if not raw.isascii():
            raw.decode("utf-8")  # a line that is not UTF-8 is invalid as a whole
        cid = _decode_line(raw).custom_id
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    return cid if isinstance(cid, str) and cid.strip() else None


def input_lines(job: JobFolder) -> Iterator[tuple[int, str]]:
    """``(line_no, custom_id)`` of every request line (``line-N`` where it has no id),
    repeats included; blank lines are not requests but keep their numbers."""
    with job.input.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if line_no == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            if raw.strip():
                yield line_no, request_id(raw) or f"line-{line_no}"


def input_ids(job: JobFolder) -> Iterator[tuple[int, str]]:
    """``(line_no, custom_id)`` of each request, at the first line that names it."""
    seen: set[str] = set()
    for line_no, custom_id in input_lines(job):
        if custom_id not in seen:
            seen.add(custom_id)
            yield line_no, custom_id


@dataclass
class Ledger:
    """The final state of each request of a job, built up as result lines are added."""

    ids: list[str]
    succeeded: set[str] = field(default_factory=set)
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> final error
    duplicate_successes: list[str] = field(default_factory=list)
    unexpected: set[str] = field(default_factory=set)
    repeated_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, id) repeats

    def __post_init__(self) -> None:
        self.known = set(self.ids)

    def add_success(self, cid: str) -> None:
        if cid in self.succeeded:
            self.duplicate_successes.append(cid)
        self.succeeded.add(cid)
        self.failed.pop(cid, None)  # a success is final, whatever failed before it
        if cid not in self.known:
            self.unexpected.add(cid)

    def add_failure(self, cid: str, error: Any) -> None:
        if cid not in self.succeeded:
            self.failed[cid] = error if isinstance(error, dict) else {}  # the latest one
        if cid not in self.known:
            self.unexpected.add(cid)

    def coverage_problems(self) -> list[str]:
        """Why the result lines do not give every input line exactly one final result
        (empty when they do): what a job must not end ``completed`` with."""
        problems = []
        if self.repeated_lines:
            listed = ", ".join(f"line {n} ({cid!r})" for n, cid in self.repeated_lines[:10])
            problems.append(
                f"{len(self.repeated_lines)} input line(s) repeat the custom_id of an earlier "
                f"line and can have no result of their own: {listed}"
            )
        for ids, what in (
            (self.missing, "requests have no result"),
            (sorted(set(self.duplicate_successes)), "requests succeeded twice"),
            (sorted(self.unexpected), "results match no request"),
        ):
            if ids:
                problems.append(f"{len(ids)} {what}, e.g. {', '.join(ids[:10])}")
        return problems

    @property
    def missing(self) -> list[str]:
        """Requests with no result at all (never run, cancelled or interrupted)."""
        return [i for i in self.ids if i not in self.succeeded and i not in self.failed]

    def retryable_failures(self) -> list[str]:
        """Failed requests that a retry may change (see :data:`NEVER_RETRIED`)."""
        return [i for i, e in self.failed.items() if (e or {}).get("code") not in NEVER_RETRIED]

    def retryable(self) -> list[str]:
        """Failed or missing requests that a rerun may fix (not invalid input)."""
        return self.missing + self.retryable_failures()


def _signature(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return 0, 0
    return stat.st_size, stat.st_mtime_ns


class LedgerReader:
    """A job's ledger, kept current by reading only the result lines appended since the
    last read: the input never changes under a job, and result files only grow (a writer
    that cuts a torn last line makes a file shorter: then it is read again)."""

    def __init__(self, job: JobFolder) -> None:
        self.job = job
        self.lock = threading.Lock()
        self.version = 0  # changes whenever the ledger does
        self._input: tuple[int, int] | None = None
        self._offsets = {"output": 0, "errors": 0}
        self.ledger = Ledger(ids=[])
        self.summary: tuple[tuple[int, int], JobSummary] | None = None  # for summary()

    def read(self) -> Ledger:
        """The ledger as the files stand now (callers hold :attr:`lock` while using it)."""
        job = self.job
        if _signature(job.input) != self._input or any(
            _signature(path)[0] < self._offsets[name]
            for name, path in (("output", job.output), ("errors", job.errors))
        ):
            self._input = _signature(job.input)
            self._offsets = {"output": 0, "errors": 0}
            self.ledger = _input_ledger(job)
            self.version += 1
        ledger = self.ledger
        for name, path in (("output", job.output), ("errors", job.errors)):
            while True:  # a bounded piece at a time: a million lines never sit in memory
                raws, after = complete_lines(path, self._offsets[name])
                if after == self._offsets[name]:
                    break
                self._offsets[name] = after
                for raw in raws:
                    line = _decode_line(raw)
                    if name == "output":
                        ledger.add_success(line.custom_id)
                    else:
                        ledger.add_failure(line.custom_id, line.error)
                self.version += 1
        return self.ledger


def _input_ledger(job: JobFolder) -> Ledger:
    ids: dict[str, int] = {}
    repeated = []
    for line_no, cid in input_lines(job):
        if cid in ids:
            repeated.append((line_no, cid))
        else:
            ids[cid] = line_no
    return Ledger(ids=list(ids), repeated_lines=repeated)


def failed_since(job: JobFolder, offset: int) -> set[str]:
    """The requests whose failure lines the job's errors file holds past byte ``offset``."""
    failed: set[str] = set()
    while True:  # a bounded piece at a time, as the ledger reads
        raws, after = complete_lines(job.errors, offset)
        if after == offset:
            return failed
        offset = after
        failed.update(_decode_line(raw).custom_id for raw in raws)


def read_ledger(job: JobFolder) -> Ledger:
    """The job's ledger, read from its files now (a torn last line is skipped)."""
    return LedgerReader(job).read()


@dataclass
class Shard:
    """A run of consecutive requests of a job, with the state of their results."""

    number: int
    first: str
    last: str
    requests: int
    succeeded: int
    failed: int

    @property
    def missing(self) -> int:
        return self.requests - self.succeeded - self.failed

    @property
    def state(self) -> str:
        if self.succeeded == self.requests:
            return "completed"
        if not self.missing:
            return "failed"
        return "pending" if self.missing == self.requests else "partial"


def retryable_shards(parts: list[Shard]) -> list[int]:
    """The numbers of the shards a retry may change: any not completed."""
    return [p.number for p in parts if p.state in ("failed", "partial", "pending")]


def shard_ids(ledger: Ledger, size: int, number: int) -> list[str]:
    """The request ids of shard ``number`` (0-based) of ``size`` requests."""
    return ledger.ids[number * size : (number + 1) * size]


def shards(ledger: Ledger, size: int) -> list[Shard]:
    """The job's requests cut into shards of ``size``, each with its counts and state."""
    found = []
    for number in range((len(ledger.ids) + size - 1) // size):
        ids = shard_ids(ledger, size, number)
        found.append(
            Shard(
                number=number,
                first=ids[0],
                last=ids[-1],
                requests=len(ids),
                succeeded=sum(i in ledger.succeeded for i in ids),
                failed=sum(i in ledger.failed for i in ids),
            )
        )
    return found


@dataclass
class Reconciliation:
    """Input lines against result lines, for a person and for scripts."""

    requests: int
    succeeded: int
    failed: int
    missing: list[str]
    duplicates: list[str]
    unexpected: list[str]
    failures_by_class: dict[str, int]
    repeated_lines: list[int] = field(default_factory=list)  # input lines that reuse an id

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.requests if self.requests else 0.0

    @property
    def complete(self) -> bool:
        return (
            not self.missing
            and not self.duplicates
            and not self.unexpected
            and not self.repeated_lines
        )

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "success_rate": self.success_rate, "complete": self.complete}


def reconcile(job: JobFolder) -> Reconciliation:
    """The job's input lines against its result lines, read now."""
    return _reconciliation(read_ledger(job))


def failure_class(error: dict[str, Any]) -> str:
    """A failure's class: its code and message, less the "line N: " an input line's own
    failure starts with (its line is in ``error["line"]``), so like failures group."""
    message = str(error.get("message", ""))
    if error.get("line") is not None:
        message = message.removeprefix(f"line {error['line']}: ")
    return f"{error.get('code', 'error')}: {message[:120]}"


def _reconciliation(ledger: Ledger) -> Reconciliation:
    classes = Counter(failure_class(e) for e in ledger.failed.values())
    return Reconciliation(
        requests=len(ledger.ids),
        succeeded=len(ledger.succeeded - ledger.unexpected),
        failed=len(set(ledger.failed) - ledger.unexpected),
        missing=ledger.missing,
        duplicates=sorted(set(ledger.duplicate_successes)),
        unexpected=sorted(ledger.unexpected),
        failures_by_class=dict(classes.most_common()),
        repeated_lines=[line_no for line_no, _ in ledger.repeated_lines],
    )


def write_rerun_file(job: JobFolder, ids: list[str], path: Path) -> int:
    """Writes the input lines of ``ids`` (in input order) as a new batch file."""
    wanted = set(ids)
    count = 0
    lines = job.input.read_text(encoding="utf-8-sig", errors="replace").splitlines()
    with path.open("w", encoding="utf-8") as out:
        for line_no, cid in input_ids(job):
            if cid in wanted:
                out.write(lines[line_no - 1] + "\n")
                count += 1
    return count


def _final_spans(path: Path) -> dict[str, tuple[int, int]]:
    """Where each request's last complete line lies in a result file: id -> (start, end).

    Raises:
        CorruptLine: a line that is not JSON (never left out without a word).
    """
    spans: dict[str, tuple[int, int]] = {}
    offset = 0
    while True:  # a bounded piece at a time
        found, after = complete_spans(path, offset)
        if after == offset:
            return spans
        for start, raw in found:
            custom_id = _decode_line(raw).custom_id
            if isinstance(custom_id, str):
                spans[custom_id] = (start, start + len(raw) + 1)  # its newline too
        offset = after


def combined_lines(
    job: JobFolder, only: Literal["successes", "errors"] | None = None
) -> Iterator[bytes]:
    """Each request's final result line as it was written (its newline included), in input
    order: its success, else its latest error. Lines are copied, never parsed and written
    again: a job of embeddings is mostly numbers, slow to print (1.5 s per 4,000 lines).
    ``only`` keeps the final lines of one kind (the Batch API's output and error files).

    Raises:
        CorruptLine: a result line that is not JSON, before any line is yielded.
    """
    successes, errors = _final_spans(job.output), _final_spans(job.errors)
    if only == "errors":  # a request's error is final only when it has no success
        errors, successes = {c: s for c, s in errors.items() if c not in successes}, {}
    elif only == "successes":
        errors = {}
    with ExitStack() as files:
        output = files.enter_context(job.output.open("rb")) if successes else None
        failed = files.enter_context(job.errors.open("rb")) if errors else None
        for _, cid in input_ids(job):
            if cid in successes:
                handle, (start, end) = output, successes[cid]
            elif cid in errors:
                handle, (start, end) = failed, errors[cid]
            else:
                continue
            handle.seek(start)
            yield handle.read(end - start)


def write_combined(job: JobFolder, path: Path, errors_path: Path | None = None) -> tuple[int, int]:
    """Writes each request's final result line to ``path`` (see :func:`combined_lines`)
    and, with ``errors_path``, the failures' final lines alone there too (OpenAI's error
    file); returns how many results there were and how many of them failed."""
    count = failures = 0
    with path.open("wb") as out:
        for line in combined_lines(job):
            out.write(line)
            count += 1
    if errors_path is not None:
        with errors_path.open("wb") as out:
            for line in combined_lines(job, only="errors"):
                out.write(line)
                failures += 1
    return count, failures


@dataclass
class Verification:
    """What ``verify`` found. The chains are unkeyed and kept beside the data, so they show
    corruption and naive edits; whoever rewrites a file and recomputes its chains passes.
    The heads (each file's last chain) let a user who keeps them elsewhere see even that."""

    ok: bool
    problems: list[str]
    lines_checked: int
    heads: dict[str, str] = field(default_factory=dict)  # file name -> its last chain
    # Answers given again, not computed (docs/reuse.md): the job each came from -> how many.
    reused: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """The verdict in words that claim no more than the check proves."""
        said = (
            f"{self.lines_checked} result lines consistent: no line changed, removed or "
            "reordered since it was written (hash chains intact), one result per request. "
            "The chains are not keyed: they catch corruption and naive edits, not a "
            "rewrite that recomputes them; keep the chain heads below elsewhere to detect "
            "that too."
        )
        if self.reused:
            # The chains vouch for a reused line as this job wrote it; that it matched its
            # source was checked when it was copied (its digest), not again here.
            sources = ", ".join(f"{n:,} from {job}" for job, n in sorted(self.reused.items()))
            said += (
                f" Of them, {sum(self.reused.values()):,} are answers given again, not "
                f"computed by this job ({sources}): checked here as this job wrote them; "
                "each matched the bytes of the line it was copied from when it was copied."
            )
        return said


def verify_chain(path: Path) -> tuple[int, list[str]]:
    """Recomputes a result file's hash chain; returns lines checked and problems found."""
    count, problems, _ = _walk_chain(path)
    return count, problems


def _walk_chain(path: Path, reused: Counter[str] | None = None) -> tuple[int, list[str], str]:
    """:func:`verify_chain`, with the last chain read (the file's head); counts in
    ``reused`` the lines that are answers given again, by the job each came from."""
    problems: list[str] = []
    previous = ""
    count = 0
    if not path.exists():
        return 0, problems, ""
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            count += 1
            if not raw.endswith(b"\n"):
                problems.append(f"{path.name} line {line_no}: torn (no newline)")
                break
            content, chain = split_chain(raw.rstrip(b"\n"))
            if chain is None:
                problems.append(f"{path.name} line {line_no}: has no {CHAIN_FIELD} field")
                break
            if chain_hash(previous, content) != chain:
                problems.append(
                    f"{path.name} line {line_no}: hash chain broken (the line, or one before "
                    "it, was changed, removed or reordered)"
                )
                break
            previous = chain
            if reused is not None and _REUSED in content:  # parsed only where it may be
                source = msgspec.json.decode(content).get("reused_from")
                if isinstance(source, dict):
                    reused[str(source.get("job") or "an earlier job")] += 1
    return count, problems, previous


_REUSED = b'"reused_from": {'  # as json.dumps writes it (core.reuse.plan.reused_line)


def verify(job: JobFolder) -> Verification:
    """Checks a job's result files for corruption and naive edits (their hash chains) and
    completeness (one result per request); see :class:`Verification` for what it proves."""
    problems: list[str] = []
    lines = 0
    heads: dict[str, str] = {}
    reused: Counter[str] = Counter()
    for path in (job.output, job.errors):
        count, found, head = _walk_chain(path, reused if path == job.output else None)
        lines += count
        problems += found
        if head:
            heads[path.name] = head
    try:
        problems += read_ledger(job).coverage_problems()  # the rule the worker ends a job by
    except CorruptLine as exc:  # the chain walk may not have reached it (a file without chains)
        problems.append(str(exc))
    return Verification(
        ok=not problems, problems=problems, lines_checked=lines, heads=heads, reused=dict(reused)
    )


@dataclass(frozen=True)
class JobSummary:
    """What a page shows of a job's ledger, computed once per change of its files."""

    reconciliation: Reconciliation
    retryable: int  # failed or missing requests a rerun may fix
    shards: list[Shard]
    retryable_failures: int = 0  # of them, failures a retry may change


READERS_KEPT = 4  # jobs whose ledgers a process keeps in memory, most recently used
_readers: Recent[Path, LedgerReader] = Recent(READERS_KEPT)


def summary(job: JobFolder, shard_size: int) -> JobSummary:
    """The job's reconciliation, rerun count and shards, for pages that redraw often.

    The ledger stays in memory between calls (for the last few jobs) and reads only what
    was appended since, so a finished job costs nothing after its first read and a running
    one only its new lines; the derived figures are recomputed only when those change.
    """
    reader = _readers.get_or_make(job.path, lambda: LedgerReader(job))
    with reader.lock:
        ledger = reader.read()
        key = (reader.version, shard_size)
        if reader.summary is None or reader.summary[0] != key:
            failures = len(ledger.retryable_failures())
            found = JobSummary(
                _reconciliation(ledger),
                len(ledger.missing) + failures,
                shards(ledger, shard_size),
                failures,
            )
            reader.summary = (key, found)
        return reader.summary[1]
