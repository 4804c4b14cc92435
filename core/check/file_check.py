"""The whole-file check: :func:`check_file` streams a batch file (flat memory) and, for a
large one, splits it into byte ranges checked side by side by helper processes."""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from core.check.model_fit import AutoRule, NameRule, TokenCheck
from core.check.report import CheckReport, Problem
from core.check.scanner import Scanner
from core.check.sensitive import DEFAULT_PHONE_REGION, SensitiveFindings, policy_now
from core.check.summary import Part, Summary
from core.config import REPO_ROOT
from core.files import lines_before
from core.model_names import line_models
from core.schemas import JobDefaults

Progress = Callable[[int, int, int], None]


# A file this large is split into byte ranges checked side by side, one process per core.
PARALLEL_CHECK_BYTES = 64 * 2**20
MAX_CHECK_PROCESSES = 4


@dataclass
class Options:
    """The settings every process of one check shares."""

    path: Path
    defaults: JobDefaults
    model_folder: str | None
    model_map: dict[str, str]
    embedding_folder: str | None = None
    count_tokens: bool = True  # False: the model judges only tool_choice "auto" lines
    sensitive: str = "warn"  # the policy for sensitive data (core.check.sensitive.POLICIES)
    phone_region: str = DEFAULT_PHONE_REGION  # numbers without a country code: the studio's
    # Mapped names whose lines are refused, or warned of (core.model_names.line_models).
    names: NameRule = field(default_factory=lambda: NameRule({}, {}))

    def summary(self, valid_out: BinaryIO | None) -> tuple[Summary, Scanner]:
        report = CheckReport(path=str(self.path), defaults=self.defaults.model_dump())
        tokens, auto = None, AutoRule(self.model_folder, dict(self.model_map))
        if self.model_folder and self.count_tokens:
            tokens = TokenCheck(self.model_folder, dict(self.model_map), self.embedding_folder)
        found = (
            SensitiveFindings(self.sensitive, self.phone_region)
            if self.sensitive != "allow"
            else None
        )
        names = self.names if self.names.refused or self.names.other_base else None
        summary, scanner = (
            Summary(report, self.defaults, tokens, valid_out, auto, found, names),
            Scanner(self.defaults),
        )
        if tokens is None:  # nothing is counted per line: the scanner folds lines in itself
            if names is not None:  # but those whose model is in question
                scanner.unfolded = frozenset([*names.refused, *names.other_base])
            scanner.shapes = summary.shapes
            scanner.digests = summary.digests
            summary.default_lines = scanner.default_lines
        return summary, scanner


def _check_range(
    options: Options,
    summary: Summary,
    scanner: Scanner,
    start: int,
    end: int,
    first_line: int,
    on_batch: Callable[[int], bool],
) -> bool:
    """Checks the lines from byte ``start`` to ``end`` into ``summary``.

    ``on_batch(bytes_done)`` is called after each batch; the check stops early when it
    returns False. Returns whether the range was checked to its end.
    """
    with options.path.open("rb", buffering=1 << 20) as handle:
        handle.seek(start)
        for batch in scanner.batches(handle, first_line=first_line, end=end):
            summary.add_batch(batch)
            summary.report.bytes_read = scanner.bytes_read - start
            if not on_batch(summary.report.bytes_read):
                return False
    return True


def _split_points(path: Path, size: int, processes: int) -> list[int]:
    """Byte offsets that cut the file into up to ``processes`` ranges at line starts."""
    points = [0]
    with path.open("rb") as handle:
        for k in range(1, processes):
            handle.seek(size * k // processes)
            handle.readline()
            if points[-1] < handle.tell() < size:
                points.append(handle.tell())
    return [*points, size]


def check_part(conn: Any, options: Options, start: int, end: int, valid_path: str | None) -> None:
    """The work of a helper process (``python -m core.check.helper``): checks one byte range,
    reporting ``(bytes, lines)`` after each batch, then sends its :class:`Part`."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(Path(valid_path).open("wb")) if valid_path else None
        summary, scanner = options.summary(out)
        scanner.ids = []

        def on_batch(done: int) -> bool:
            conn.send((done, summary.report.lines))
            return True

        first_line = lines_before(options.path, start) + 1
        _check_range(options, summary, scanner, start, end, first_line, on_batch)
    ids = msgspec.msgpack.encode(scanner.ids)
    scanner.ids = None  # a large list: free it before the part is pickled
    failed = summary.tokens.failed if summary.tokens else {}
    conn.send(
        Part(
            summary.report,
            summary.shapes,
            summary.default_lines,
            scanner.crlf,
            failed,
            ids,
            scanner.id_lines,
            summary.digests,
        )
    )


def _helper_env() -> dict[str, str]:
    """This environment, with the project on the import path (for ``-m core...``)."""
    root = str(REPO_ROOT)
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def fork_helpers() -> bool:
    """Whether helpers are copies of this process (``os.fork``) rather than new Python
    processes: only on Linux and where this process runs one thread (the command line).
    A copy starts at once with every module already imported (a new ``python -m
    core.check.helper`` imports pydantic, msgspec and the check first: about 0.6 s of CPU
    where they are not byte-compiled, the time the check of 100,000 lines takes); but a
    fork copies only the calling thread, so a lock another thread held (a server's, a
    page's) would stay held in the copy."""
    return (
        sys.platform == "linux"
        and threading.active_count() == 1
        and threading.current_thread() is threading.main_thread()
    )


class _Forked:
    """The calls of :class:`subprocess.Popen` a :class:`_Helper` makes, for a forked copy."""

    def __init__(self, pid: int, read: int) -> None:
        self.pid, self.read, self.returncode = pid, read, None  # read: its pipe's read end

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


def _forked_helper(options: Options, start: int, end: int, valid_path: str | None) -> _Forked:
    """A copy of this process that checks one byte range (:func:`check_part`) and reports
    over a pipe (the read end is the returned process's ``read``)."""
    from multiprocessing.connection import Connection

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: it leaves by os._exit, so nothing of the parent's exit runs
        code = 1
        try:
            os.close(read)
            conn = Connection(write, readable=False)
            check_part(conn, options, start, end, valid_path)
            conn.close()
            code = 0
        finally:
            os._exit(code)  # a failure says nothing: its range is checked by the parent
    os.close(write)
    return _Forked(pid, read)


class _Helper:
    """A helper process checking one byte range of the file while this one checks another.

    A copy of this process where it runs one thread (:func:`fork_helpers`), else a plain
    subprocess (not ``multiprocessing``), so nothing of the caller's ``__main__`` (a
    Streamlit page, a user's script) runs again in it. It reports progress and then its
    :class:`Part` over a pipe; one that fails leaves its range to the caller.
    """

    def __init__(self, options: Options, start: int, end: int, valid_path: str | None) -> None:
        from multiprocessing.connection import Connection

        self.start, self.end, self.valid_path = start, end, valid_path
        self.done = self.lines = 0
        self.part: Part | None = None
        self.process: subprocess.Popen | _Forked
        if fork_helpers():
            self.process = _forked_helper(options, start, end, valid_path)
            self.conn = Connection(self.process.read, writable=False)
            return
        read, write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "core.check.helper", str(write)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # a failure shows as the range being checked here
            pass_fds=(write,),
            env=_helper_env(),  # same working folder, so relative paths mean the same
        )
        os.close(write)
        self.conn = Connection(read, writable=False)
        try:
            with self.process.stdin:
                pickle.dump((options, start, end, valid_path), self.process.stdin)
        except OSError:  # it died at once; take() says so
            pass

    def poll(self, timeout: float = 0.0) -> bool:
        """Reads what the helper sent; True once its part (or its end) has arrived."""
        try:
            while self.part is None and self.conn.poll(timeout):
                message = self.conn.recv()
                if isinstance(message, Part):
                    self.part = message
                else:
                    self.done, self.lines = message
                timeout = 0.0
        except (EOFError, OSError):  # it ended without its part
            return True
        return self.part is not None

    def take(self, wait: Callable[[], bool]) -> Part | None:
        """The helper's part once it has sent it; None when it failed or ``wait()``, called
        while waiting, returned False."""
        while not self.poll(timeout=0.2):
            if not wait():
                return None
        return self.part

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.conn.close()
        if self.valid_path is not None:
            Path(self.valid_path).unlink(missing_ok=True)


def _processes(size: int, processes: int | None) -> int:
    if processes is not None:
        return max(1, processes)
    if size < PARALLEL_CHECK_BYTES:
        return 1
    return max(1, min(len(os.sched_getaffinity(0)), MAX_CHECK_PROCESSES))


def check_file(
    path: str | Path,
    defaults: JobDefaults | None = None,
    *,
    model_folder: str | Path | None = None,
    model_map: dict[str, str] | None = None,
    embedding_folder: str | Path | None = None,
    count_tokens: bool = True,
    valid_out: str | Path | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    processes: int | None = None,
    sensitive: str | None = None,
    phone_region: str | None = None,
) -> CheckReport:
    """Checks a whole batch file and summarises it, streaming (memory stays flat).

    A large file is cut into byte ranges at line starts, checked side by side: this
    process takes the first, helper processes the others, and their summaries are merged
    in file order. An id repeated across ranges is caught when merging: that range is then
    checked again here, after the ones before it, so each repeat names its first line.

    Args:
        path: the batch JSONL file.
        defaults: the job defaults for fields a body leaves out.
        model_folder: the chosen local model; when given, prompt tokens are counted with
            its tokenizer and chat template and checked against its context length.
        model_map: body ``model`` name -> local model folder or LoRA adapter folder;
            unmapped names use ``model_folder`` (``embedding_folder`` for embeddings
            lines). An adapter's lines are counted with its base; a line whose name maps
            to a folder that is gone, no model or adapter, or an adapter that cannot run is
            refused, naming it (:func:`core.model_names.line_models`).
        embedding_folder: the embedding model embeddings lines run on (default: the
            built-in one).
        count_tokens: False for a check of the structure only: no tokenizer is loaded,
            and the model (``model_folder``, or a mapped one) judges only whether an
            ``auto`` tool line can run on it (with no model, such a line gets a warning
            that it was not checked).
        valid_out: when given, the valid lines are written there (same order).
        progress: called as ``progress(bytes_read, total_bytes, lines)`` after each batch.
        cancel: set it to stop early; the report then says ``cancelled``.
        processes: how many processes check the file (default: one per core, up to 4,
            for files of 64 MiB or more; one for smaller files).
        sensitive: the policy for sensitive data in prompts (allow: no scan; warn and
            redact: listed in the report; refuse: the report has an error naming the
            lines); default the
            studio's (Settings), so that every entry point keeps it.
        phone_region: the region a phone number without a +country code is read as;
            default the studio's (Settings). Read here once: the helpers get it as given.
    """
    started = time.monotonic()
    note = None
    if sensitive is None or phone_region is None:
        kept = policy_now()
        if sensitive is None:  # the note says which policy is kept: only where it is this one
            sensitive, note = kept.policy, kept.note
        phone_region = phone_region or kept.phone_region
    names = line_models(model_map or {}, model_folder)
    options = Options(
        Path(path),
        defaults or JobDefaults(),
        str(model_folder) if model_folder is not None else None,
        names.model_map,
        str(embedding_folder) if embedding_folder is not None else None,
        count_tokens,
        sensitive,
        phone_region,
        NameRule(names.refused, names.other_base),
    )
    total = options.path.stat().st_size
    points = _split_points(options.path, total, _processes(total, processes))
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(Path(valid_out).open("wb")) if valid_out is not None else None
        summary, scanner = options.summary(out)
        report = summary.report
        helpers: list[_Helper] = []
        for k, (start, end) in enumerate(itertools.pairwise(points[1:])):
            valid_path = f"{valid_out}.part{k + 1}" if valid_out is not None else None
            helpers.append(_Helper(options, start, end, valid_path))
            stack.callback(helpers[-1].close)
        merged = 0  # bytes of the ranges already in the summary
        pending = list(helpers)  # helpers whose part is not in the summary yet

        def on_batch(done: int) -> bool:
            for helper in pending:  # read their progress, so that no helper waits on a full pipe
                helper.poll()
            if progress is not None:
                more_bytes, more_lines = sum(h.done for h in pending), sum(h.lines for h in pending)
                progress(merged + done + more_bytes, total, report.lines + more_lines)
            return cancel is None or not cancel.is_set()

        finished = _check_range(options, summary, scanner, 0, points[1], 1, on_batch)
        merged = points[1]
        for helper in helpers if finished else []:
            part = helper.take(lambda: on_batch(0))
            pending.remove(helper)
            if cancel is not None and cancel.is_set():
                finished = False
                break
            keys = [hash(cid) for cid in msgspec.msgpack.decode(part.ids)] if part else []
            if part is not None and scanner.first_line_of.keys().isdisjoint(keys):
                scanner.first_line_of.update(zip(keys, part.id_lines, strict=True))
                scanner.crlf |= part.crlf
                summary.merge(part)
                report.processes += 1
                if out is not None:
                    with Path(helper.valid_path).open("rb") as piece:
                        shutil.copyfileobj(piece, out, 1 << 20)
            else:  # the helper failed, or an id repeats an earlier range: check it here
                first_line = lines_before(options.path, helper.start) + 1
                finished = _check_range(
                    options, summary, scanner, helper.start, helper.end, first_line, on_batch
                )
                if not finished:
                    break
            merged = helper.end
        report.cancelled = not finished
        report.bytes_read = total if finished else merged
        summary.finish(scanner.bom, scanner.crlf)
    if note is not None:
        report.problems.insert(0, Problem(0, "note", note))
    for name, said in names.own_tokenizer.items():
        if report.models.get(name):  # only the adapters the file names
            report.problems.insert(0, Problem(0, "note", said))
    report.seconds = round(time.monotonic() - started, 3)
    if progress is not None:
        progress(report.bytes_read, total, report.lines)
    return report
