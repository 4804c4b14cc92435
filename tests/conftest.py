"""Shared fixtures: a private data folder per test and the prepared built-in models."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit.components.v2 import manifest_scanner
from xdist.remote import Producer

from core.store.db import Store
from tests.support.api import api, keys  # noqa: F401  (Batch API tests)
from tests.support.api_server import served, warm_served  # noqa: F401  (a running core serve)
from tests.support.bounds import short_render_bound  # noqa: F401  (templates that never end)
from tests.support.browser import (  # noqa: F401  (browser tests)
    chromium_page,
    module_server,
    pytest_runtest_teardown,
    studio_server,
)
from tests.support.containment import good_and_broken  # noqa: F401  (broken job folders)
from tests.support.engine_child import engine_child  # noqa: F401  (vLLM in a process of its own)
from tests.support.jobs import finished_job
from tests.support.refused_batches import client  # noqa: F401  (an API client, in process)
from tests.support.s3 import s3, s3_requests  # noqa: F401  (object storage tests)
from tests.support.tool_auto import hermes_model  # noqa: F401  (a tools template)
from tests.support.warm_engine import (  # noqa: F401  (a shared engine)
    no_warm_worker,
    warm_engine_env,
    warm_engine_home,
    warm_home,
    warm_s3,
    warm_s3_endpoint,
)
from tests.support.xdist_schedule import SharingTestsTogether, order_slow_first

# Workers that tests start exit after their last job, as before the resident engine, unless
# a test asks for an idle time (tests/engine/test_resident.py): none outlives its test.
os.environ.setdefault("BATCH_STUDIO_ENGINE_IDLE", "0")
# Pages wait for the figures they compute (a test's few results take milliseconds, but a
# loaded machine may take longer than a page's usual wait): tests assert the figures, and
# tests/unit/test_dashboards.py sets its own wait to see "Computing…" then the figures.
os.environ.setdefault("BATCH_STUDIO_PAGE_WAIT", "none")
# Jobs compute every request unless a test asks for reuse (core/config.py reuse_default):
# in a shared home (the warm engine's, a browser server's) an earlier test's answers would
# otherwise stand in for the engine. The tests of reuse turn it on for their jobs.
os.environ.setdefault("BATCH_STUDIO_REUSE", "0")
# Every AppTest start scans each installed distribution's metadata for Streamlit
# components (1.3 s of a page test's 1.6 s here, 645 distributions); nothing is installed
# during a test run, so one scan per process serves every AppTest.
manifest_scanner.scan_component_manifests = functools.cache(
    manifest_scanner.scan_component_manifests
)

PHASES = ("all", "parallel", "serial")
TESTS = Path(__file__).parent
# The kinds a folder decides (docs/tests.md), first wins: a Ray test also loads the engine,
# and a browser test may too.
FOLDER_KINDS = ("ray", "browser", "engine")
MISPLACED = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--phase",
        choices=PHASES,
        default="all",
        help="`make test`'s phases (docs/tests.md): the tests not marked serial (on one "
        "worker per core), or those marked serial (alone on the machine)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """In a pytest-xdist worker (``gw0``, ``gw1``, ...), gives the engines its tests start
    one OpenMP thread, and torch in this process one: there is a worker per core, so each
    worker's model takes a core's worth instead of every engine's threads fighting for all."""
    if os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_runtest_protocol(item: pytest.Item) -> None:
    """Notes in each test's report (the JUnit XML's properties) the worker that ran it and
    when it started: scripts/test_report.py shows from them how busy each worker was."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    item.user_properties += [("worker", worker), ("started", f"{time.time():.1f}")]


def pytest_itemcollected(item: pytest.Item) -> None:
    """The folder decides the kind: a test under ``tests/engine/``, ``tests/browser/`` or
    ``tests/ray/`` gets that marker (so ``-m "not engine"`` selects by folder), and a test
    that carries one of those markers elsewhere is noted, to fail the collection."""
    parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
    folder = parts[0] if len(parts) > 1 else None
    if folder in FOLDER_KINDS:
        item.add_marker(folder)
    kind = next((k for k in FOLDER_KINDS if item.get_closest_marker(k)), None)
    if kind is not None and folder != kind:
        item.config.stash.setdefault(MISPLACED, []).append(
            f"{item.nodeid}: marked {kind}, so it belongs in tests/{kind}/"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fails on a test whose marker is not its folder's; then ``--phase parallel`` leaves
    out the tests marked serial and puts the slow ones first (as every run on xdist workers
    does, `make check`'s); ``--phase serial`` keeps only the tests marked serial."""
    misplaced = config.stash.get(MISPLACED, [])
    if misplaced:
        raise pytest.UsageError(
            "tests in the wrong folder (the folder is the kind; docs/tests.md):\n"
            + "\n".join(misplaced)
        )
    phase = config.getoption("phase")
    if phase == "all":
        if os.environ.get("PYTEST_XDIST_WORKER"):  # `make check`: the slow units first
            order_slow_first(items)
        return
    kept, left = [], []
    for item in items:
        serial = item.get_closest_marker("serial") is not None
        (kept if serial == (phase == "serial") else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    if phase == "parallel":
        order_slow_first(items)


def pytest_xdist_make_scheduler(
    config: pytest.Config, log: Producer
) -> SharingTestsTogether | None:
    """``-n N`` (``--dist load``) runs the Ray cluster tests on one worker, one after
    another (tests/support/xdist_schedule.py)."""
    if config.getoption("dist") == "load":
        return SharingTestsTogether(config, log)
    return None


@pytest.fixture
def studio_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh ``BATCH_STUDIO_HOME`` for this test (and the processes it starts), and no
    DuckDB store kept by the app's resource cache from another test."""
    import streamlit as st

    home = tmp_path / "home"
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(home))
    st.cache_resource.clear()
    yield home
    st.cache_resource.clear()


@pytest.fixture
def finished_store(tmp_path: Path) -> Iterator[tuple[Store, str]]:
    """A fresh store (``tmp_path/studio.duckdb``) holding one finished job of six answered
    requests, ``r0`` to ``r5``; yields the store and the job's id."""
    rows = [{"custom_id": f"r{i}", "prompt": f"p{i}", "answer": f"a{i}"} for i in range(6)]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    yield store, job.job_id
    store.close()


@pytest.fixture
def sampled_store(finished_store, tmp_path: Path) -> tuple[Store, str, str, Path]:
    """``finished_store`` with a sample ``s`` of four of its answers: the store, the job's
    id, the sample's id and the test's folder."""
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample

    store, job_id = finished_store
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=4)
    return store, job_id, create_sample(store, "s", definition).sample_id, tmp_path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A folder that passes the model-folder check (no engine runs in these tests)."""
    folder = tmp_path / "tiny-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


@pytest.fixture
def no_worker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the jobs whose worker ``submit`` would start, instead of starting one."""
    started: list[str] = []
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: started.append(job))
    return started


@pytest.fixture(scope="session")
def default_model() -> Path:
    """The built-in model's folder (converted by ``make test``'s set-up, or here)."""
    from core.model_folders import prepare_default_model

    return prepare_default_model()


@pytest.fixture(scope="session")
def embedding_model() -> Path:
    """The built-in embedding model's folder (unzipped by set-up, or here)."""
    from core.model_folders import prepare_embedding_model

    return prepare_embedding_model()


@pytest.fixture(scope="session")
def cross_encoder_model(embedding_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real cross-encoder folder (tests/support/cross_encoder.py), made once per session."""
    from tests.support.cross_encoder import make_cross_encoder

    return make_cross_encoder(tmp_path_factory.mktemp("models") / "tiny-reranker", embedding_model)


@pytest.fixture
def calibrated_judges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every verdict judge counts as having passed its calibration, in this process: for
    the tests of what a judge does once offered (tests/unit/test_judge_calibration.py tests the
    calibration itself, and tests/engine/test_judge_engine.py the built-in model's refusal)."""
    from core.qa import calibration as cal
    from core.qa import judge

    def passed(text: str, settings: judge.JudgeSettings, jobs_dir: Path | None = None):
        return cal.Calibration(
            key="test", model=settings.model, job_id="job_test", state="passed", agreed=10
        )

    monkeypatch.setattr(judge, "calibration", passed)
