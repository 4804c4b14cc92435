"""A check that runs beside a page: :class:`BackgroundCheck` polls the progress of
:func:`check_file` in a thread, and :func:`check_key` says when a report can be reused."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from core.check.file_check import check_file
from core.check.report import CheckReport
from core.check.sensitive import policy_now
from core.recent import Recent


class BackgroundCheck:
    """:func:`check_file` in a thread, so a page can poll its progress without blocking.

    Attributes:
        fraction: the share of the file read so far (0 to 1).
        lines: lines checked so far.
        report: the report once done; ``error`` holds the reason when the check failed.
    """

    def __init__(self, path: str | Path, key: str = "", **options: Any) -> None:
        self.path = str(path)
        self.key = key  # what the caller checks against to reuse a running check
        self.fraction = 0.0
        self.lines = 0
        self.report: CheckReport | None = None
        self.error: str | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(options,), name="batch-check", daemon=True
        )
        self._thread.start()

    def _progress(self, done: int, total: int, lines: int) -> None:
        self.fraction = done / total if total else 1.0
        self.lines = lines

    def _run(self, options: dict[str, Any]) -> None:
        try:
            self.report = check_file(
                self.path, progress=self._progress, cancel=self._cancel, **options
            )
            if self.key and not self.report.cancelled:
                remember(self.key, self.report)
        except OSError as exc:
            self.error = f"the file could not be read: {exc}"
        except Exception as exc:  # shown on the page instead of killing the thread silently
            self.error = f"the check stopped on an unexpected error: {exc!r}"

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done


# Files up to this size are checked while a page waits; larger ones in a BackgroundCheck.
SYNC_CHECK_BYTES = 16 * 2**20


def check_key(path: str | Path, **options: Any) -> str:
    """A key that changes when the file or any check option changes (for caching a report)."""
    import hashlib

    if options.get("sensitive") is None or options.get("phone_region") is None:
        kept = policy_now()  # the studio's policy and region: a new one checks again
        options = {
            **options,
            "sensitive": options.get("sensitive") or kept.policy,
            "phone_region": options.get("phone_region") or kept.phone_region,
        }
    stat = Path(path).stat()
    data = json.dumps(
        [str(path), stat.st_size, stat.st_mtime_ns, options], sort_keys=True, default=str
    )
    return hashlib.blake2b(data.encode(), digest_size=8).hexdigest()


def file_signature(path: str | Path) -> tuple[str, int, int]:
    """Which file, at which size and modification time: a report made for one signature
    holds for the file until it changes."""
    stat = Path(path).stat()
    return str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns


REPORTS_KEPT = 8
_reports: Recent[str, CheckReport] = Recent(REPORTS_KEPT)  # check_key -> its report


def remember(key: str, report: CheckReport) -> CheckReport:
    """Keeps a finished check's report under its :func:`check_key` (the newest few)."""
    return _reports.put(key, report)


def recall(key: str) -> CheckReport | None:
    """The report a check of the same file (path, size, time) with the same options made
    in this process, whichever session asked: a file is never checked twice alike."""
    return _reports.get(key)


def checked(path: str | Path, **options: Any) -> CheckReport:
    """The check of a file with these :func:`check_file` options (none: structural only),
    made once per file, time and options in this process: a page that redraws on every
    click, or a submission right after its check, never checks the same file twice."""
    key = check_key(path, **options)
    return recall(key) or remember(key, check_file(path, **options))
