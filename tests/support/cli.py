"""The CLI as a user runs it, with the test's environment: in this process (``cli``), or
as its own process where the process is the point (``run_cli``)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

from core.config import REPO_ROOT


@dataclass(frozen=True)
class CliResult:
    """What a command did, shaped like the ``CompletedProcess`` that ``run_cli`` returns."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def cli(*args: str) -> CliResult:
    """Runs ``python -m core ARGS`` in this process: ``core.cli.main.main`` with its output
    captured and its exit code, argparse's ``SystemExit`` included.

    It saves the start of a Python process (about 2 s of imports) per call. Like
    ``run_cli``, it runs in the repository root with this test's environment. What differs
    from a process of its own: the test's monkeypatches reach the command, a DuckDB file this
    process holds is not locked against it, and an exception the command does not catch
    fails the test with its traceback instead of exiting 1 (no test of the CLI wants one).
    A command that leaves this process changed (its environment, working directory, signal
    handlers or logging handlers) fails the test: ``main`` must be callable twice.
    """
    if args[:1] == ("serve",):  # it would exec Streamlit in place of the test's process
        raise ValueError("core serve replaces its process: use run_cli")
    from core.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    # Without a handler of its own, a process's warnings reach stderr through logging's last
    # resort; pytest's log capture stands in for it here, so give them the same way out.
    to_stderr = logging.StreamHandler(err)
    to_stderr.setLevel(logging.WARNING)
    root = logging.getLogger()
    before = _process_state()
    root.addHandler(to_stderr)
    try:
        with (
            contextlib.chdir(REPO_ROOT),
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            try:
                code = _exit_status(main(list(args)), err)  # as `raise SystemExit(main())`
            except SystemExit as exit_:  # argparse's usage errors, and any sys.exit
                code = _exit_status(exit_.code, err)
    finally:
        root.removeHandler(to_stderr)
    after = _process_state()
    left = [name for name in before if before[name] != after[name]]
    assert not left, f"core {' '.join(args)} left this process's {' and '.join(left)} changed"
    return CliResult(["python", "-m", "core", *args], code, out.getvalue(), err.getvalue())


def _process_state() -> dict[str, object]:
    """What a command run in this process could leave behind for the next one."""
    return {
        "environment": dict(os.environ),  # compared, never printed: a value may be a secret
        "working directory": os.getcwd(),
        "signal handlers": {
            s.name: signal.getsignal(s)
            for s in signal.valid_signals()
            if isinstance(s, signal.Signals)
        },
        "logging handlers": list(logging.getLogger().handlers),
    }


def _exit_status(code: object, err: io.StringIO) -> int:
    """The status a process exits with for ``SystemExit(code)``, as Python's own does it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1


def run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs ``python -m core ARGS`` as a user would, in its own process, with this test's
    environment: for the tests whose point is the process (its exit, a lock another process
    holds, ``core serve``); the others use :func:`cli`."""
    return subprocess.run(
        [sys.executable, "-m", "core", *args],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
