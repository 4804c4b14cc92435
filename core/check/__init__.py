"""The batch check: every line of a batch file checked before any compute is spent.

- :mod:`~core.check.requests` maps a request body onto what the engine runs (and
  :mod:`~core.check.fast_path` decodes the common chat line in one msgspec call);
- :mod:`~core.check.line` checks one line on the generic path, with precise messages;
- :mod:`~core.check.scanner` reads a file in order and names repeated ids;
- :mod:`~core.check.summary` folds lines into a :class:`CheckReport`, with prompt tokens
  counted by :mod:`~core.check.tokens` against the model's context;
- :mod:`~core.check.file_check` checks a whole file, split over processes when large;
- :mod:`~core.check.background` runs a check beside a page.

Callers outside this package use the names below.
"""

from core.check.background import (
    SYNC_CHECK_BYTES,
    BackgroundCheck,
    check_key,
    checked,
    file_signature,
    recall,
    remember,
)
from core.check.file_check import check_file
from core.check.report import (
    CONTEXT_EXCEEDED,
    DUPLICATE_ID,
    EMPTY_FILE,
    UNREADABLE,
    CheckedLine,
    CheckReport,
    Problem,
    histogram_labels,
    setting_rows,
    summary_lines,
)
from core.check.scanner import scan

__all__ = [
    "CONTEXT_EXCEEDED",
    "DUPLICATE_ID",
    "EMPTY_FILE",
    "SYNC_CHECK_BYTES",
    "UNREADABLE",
    "BackgroundCheck",
    "CheckReport",
    "CheckedLine",
    "Problem",
    "check_file",
    "check_key",
    "checked",
    "file_signature",
    "histogram_labels",
    "recall",
    "remember",
    "scan",
    "setting_rows",
    "summary_lines",
]
