"""One warm engine per pytest process, shared by the engine tests that only need jobs run.

Loading a model costs an engine test 15-30 s on a busy 2-core machine, more than many of
those tests' own work. The ``warm_home`` fixture gives a test the session's studio home
instead of a fresh one: its first job starts a resident worker (``core.run.resident``) that
keeps its models loaded for the whole session, and every later test's jobs run on it, as
an analyst's do while the studio serves. A test that kills a worker, times one, or needs
an empty home keeps ``studio_home``.

A test that kills a worker mid-job to see its resume lose nothing kills the warm one: the
resume's worker (a cold start, the one a kill costs) is the home's warm worker after it.

Jobs of earlier tests are in that home too: a test finds its own by the id ``core run``
prints (:func:`started_job`, :func:`run_in_background`), never by listing the jobs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.config import REPO_ROOT
from core.jobs.engine_files import IDLE_ENV, read_state
from core.jobs.folder import JobFolder
from core.schemas import JobStatus
from tests.support.cli import CliResult

SESSION_IDLE = "3600"  # outlasts any session; the fixture stops the worker at its end


@pytest.fixture(scope="session")
def warm_engine_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's studio home whose resident worker keeps the models loaded; the
    worker is stopped (with its engine's processes) when the session ends."""
    home = tmp_path_factory.mktemp("warm-engine") / "home"
    yield home
    state = read_state(home)
    if state is not None:
        # Gone already where a test killed it and nothing started another.
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)  # its engine's processes die with it


@pytest.fixture
def warm_home(warm_engine_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's studio home is the session's warm one (``BATCH_STUDIO_HOME``, for the
    processes it starts too), whose worker stays between tests."""
    import streamlit as st

    monkeypatch.setenv("BATCH_STUDIO_HOME", str(warm_engine_home))
    monkeypatch.setenv(IDLE_ENV, SESSION_IDLE)
    st.cache_resource.clear()
    yield warm_engine_home
    st.cache_resource.clear()


def started_job(result: CliResult | subprocess.CompletedProcess, home: Path) -> JobFolder:
    """The job a ``core run`` started, by the id it printed ("job ID started: ...")."""
    found = re.search(r"^job (\S+) started", result.stdout, re.MULTILINE)
    assert found, f"no job started: {result.stdout[-1000:]}{result.stderr[-2000:]}"
    return JobFolder(home / "jobs" / found.group(1))


def wait_until(
    job: JobFolder, predicate: Callable[[JobStatus], bool], timeout: float = 300
) -> JobStatus:
    """This job's status once ``predicate`` holds (the warm home holds other tests' jobs,
    so a test waits on its own, not on the newest in the folder)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = job.read_status()
        if predicate(status):
            return status
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for job {job.job_id}: {job.read_status()}")


def run_in_background(home: Path, *args: str) -> tuple[subprocess.Popen[str], JobFolder]:
    """``core run ARGS`` started and left running (its output piped), and the job it
    started, by the id it printed."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "core", "run", *args],
        cwd=REPO_ROOT,
        env=os.environ.copy(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert cli.stdout is not None and cli.stderr is not None
    for line in cli.stdout:
        found = re.match(r"job (\S+) started", line)
        if found:
            return cli, JobFolder(home / "jobs" / found.group(1))
    raise AssertionError(f"no job started: {cli.stderr.read()[-2000:]}")
