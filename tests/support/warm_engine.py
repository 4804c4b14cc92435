"""One warm engine per pytest process, shared by the engine tests that only need jobs run.

Loading a model costs an engine test 15-30 s on a busy 2-core machine, more than many of
those tests' own work. The ``warm_home`` fixture gives a test the session's studio home
instead of a fresh one: its first job starts a resident worker (``core.run.resident``) that
keeps its models loaded for the whole session, and every later test's jobs run on it, as
an analyst's do while the studio serves. A test that kills a worker, times one, or needs
an empty home keeps ``studio_home``.

The warm worker is started with the credentials of a local S3 server (moto) that lives as
long as it does (``warm_s3``), so a job that reads or delivers ``s3://`` objects runs on it
too: a worker reads its credentials from its environment once, when it starts.

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
from typing import Any

import pytest

from core.config import REPO_ROOT
from core.jobs.engine_files import BUDGET_ENV, IDLE_ENV, read_state
from core.jobs.folder import JobFolder
from core.schemas import JobStatus
from tests.support.cli import CliResult

SESSION_IDLE = "3600"  # outlasts any session; the fixture stops the worker at its end
# The warm worker would keep every model the session asks for while the machine has room
# (five engines, about 13 GB, measured): beside a Ray cluster that left Ray's memory monitor
# killing replicas. Two chat models and an embedding model fit in this; the least
# recently used goes first.
WARM_BUDGET_MIB = "8192"
# the standard AWS variables a client reads, but for the endpoint: set per session
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
S3_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")


@pytest.fixture(scope="session")
def warm_s3_endpoint() -> Iterator[str]:
    """The URL of a local S3 server (moto, in a thread of this process) with the bucket
    ``batches``, for the whole session: the warm worker is started with its credentials."""
    import boto3
    from moto.server import ThreadedMotoServer

    from tests.support.browser import free_port
    from tests.support.s3 import BUCKET

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=url, **_boto_credentials()).create_bucket(Bucket=BUCKET)
    try:
        yield url
    finally:
        server.stop()


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_CREDENTIALS["AWS_DEFAULT_REGION"],
    }


@pytest.fixture(scope="session")
def warm_engine_env(warm_s3_endpoint: str) -> dict[str, str]:
    """What a process that may start the warm worker adds to its environment: the worker
    keeps it for the session."""
    return {
        IDLE_ENV: SESSION_IDLE,
        BUDGET_ENV: WARM_BUDGET_MIB,
        "AWS_ENDPOINT_URL": warm_s3_endpoint,
        **S3_CREDENTIALS,
    }


@pytest.fixture
def warm_s3(warm_home: Path, warm_s3_endpoint: str) -> Any:
    """A client of the warm worker's S3 server (bucket ``batches``), for a test's set-up;
    the test's processes reach the same server (``warm_home`` sets their environment)."""
    import boto3

    return boto3.client("s3", endpoint_url=warm_s3_endpoint, **_boto_credentials())


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
def no_warm_worker(warm_engine_home: Path) -> None:
    """Ends the session's warm worker, if one runs, before a test that judges the machine's
    memory with a worker of its own (a load beside another when RAM allows): the warm
    worker's models would take that room. A later ``warm_home`` test would start it again,
    cold: in ``make test`` none comes later (tests/support/xdist_schedule.py)."""
    state = read_state(warm_engine_home)
    if state is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGKILL)  # its engine's processes die with it
    deadline = time.monotonic() + 60
    while read_state(warm_engine_home) is not None and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.fixture
def warm_home(
    warm_engine_home: Path, warm_engine_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """This test's studio home is the session's warm one (``BATCH_STUDIO_HOME``, for the
    processes it starts too), whose worker stays between tests."""
    import streamlit as st

    use_warm_home(monkeypatch, warm_engine_home, warm_engine_env)
    st.cache_resource.clear()
    yield warm_engine_home
    st.cache_resource.clear()


def use_warm_home(monkeypatch: pytest.MonkeyPatch, home: Path, engine_env: dict[str, str]) -> None:
    """Points this process's studio home, and that of the processes it starts, at the warm
    one (``warm_engine_home``, ``warm_engine_env``): for a module-scoped fixture, which
    cannot ask for ``warm_home``, inside a ``pytest.MonkeyPatch.context()``."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(home))
    for name, value in engine_env.items():
        monkeypatch.setenv(name, value)
    for name in S3_UNSET:
        monkeypatch.delenv(name, raising=False)


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
    # The worker's last records (vLLM's warnings left out) say why, on a CI run too.
    records = [r for r in job.log_tail(400).splitlines() if " WARN" not in r][-40:]
    raise AssertionError(
        f"timed out waiting for job {job.job_id}: {job.read_status()}\n"
        + "its worker.log ends:\n"
        + "\n".join(records)
    )


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
