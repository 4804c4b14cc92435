"""A studio of jobs in known states for ``/metrics`` and Monitor's summary to count
(tests/unit/test_metrics.py, tests/pages/test_metrics_pages.py), and a scrape parsed."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.api.routes import api_routes
from core.config import data_paths
from core.jobs.folder import JobFolder, create_job, queue_job
from core.schemas import EngineConfig
from tests.support.jobs import finished_job, request_line

FIRST_TOKEN_AFTER = 2.5  # the running job's first token, seconds after its queueing
KV_CACHE_USAGE = 0.375  # the running job's last sample


def waiting_job(home: Path, lines: int) -> JobFolder:
    """A job of ``lines`` requests queued, no worker taking it."""
    batch = home / f"queued-{lines}.jsonl"
    batch.write_text("".join(request_line(f"q{i}", "hi") + "\n" for i in range(lines)))
    job = create_job(batch, data_paths().jobs, EngineConfig(model="/models/tiny"))
    queue_job(job)
    return job


def running_job(home: Path, in_flight: int) -> JobFolder:
    """A job on its engine now: this process as its worker, a fresh heartbeat, ``in_flight``
    requests in the engine, its first token :data:`FIRST_TOKEN_AFTER` s after its queueing
    and a last sample with the engine's KV cache at :data:`KV_CACHE_USAGE`."""
    job = waiting_job(home, 10)
    status = job.read_status()
    queued_at = datetime.fromisoformat(status.history[-1]["at"]).timestamp()
    for state in ("loading", "running"):
        status.enter(state)
    status.total, status.pid, status.heartbeat_at = 10, os.getpid(), time.time()
    status.in_flight, status.first_token_at = in_flight, queued_at + FIRST_TOKEN_AFTER
    job.write_status(status)
    engine = {"running": in_flight, "waiting": 0, "kv_cache_usage": KV_CACHE_USAGE}
    sample = {"t": time.time(), "done": 0, "output_tokens": 7, "engine": engine}
    job.metrics.write_text(json.dumps(sample) + "\n")
    return job


def failed_job(home: Path) -> JobFolder:
    """A job that ran one answer and then failed (its worker's last word)."""
    job = finished_job(home, {"f": "done"}, {"f": 250}, name="failed.jsonl")
    status = job.read_status()
    status.enter("failed", "the engine stopped")
    job.write_status(status)
    return job


def studio(home: Path) -> dict[str, JobFolder]:
    """One job of each kind in the data folder:

    - ``finished``: 3 requests, ``a`` (1.2 s) and ``c`` (0.04 s) answered, ``b`` failed
      (engine_rejected); 5 prompt and 3 output tokens per answer
    - ``failed``: one answer (0.25 s), then failed
    - ``queued``: 4 lines waiting
    - ``running``: 3 requests in the engine (see :func:`running_job`)
    """
    home.mkdir(parents=True, exist_ok=True)
    return {
        "finished": finished_job(home, {"a": "yes", "b": None, "c": "no"}, {"a": 1200, "c": 40}),
        "failed": failed_job(home),
        "queued": waiting_job(home, 4),
        "running": running_job(home, 3),
    }


def loopback() -> TestClient:
    """The API's app as a client on this machine reaches it (no key needed)."""
    return TestClient(Starlette(routes=api_routes()), client=("127.0.0.1", 50000))


def scrape(client: TestClient, key: str | None = None) -> dict[tuple[str, frozenset], float]:
    """``GET /metrics`` parsed by prometheus_client: ``(sample name, labels) -> value``."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    reply = client.get("/metrics", headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(scraped: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The sample ``name`` with exactly these labels (0 when absent)."""
    return scraped.get((name, frozenset(labels.items())), 0.0)


def total(scraped: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include these."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in scraped.items() if n == name and wanted <= got)
