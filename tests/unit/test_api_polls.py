"""Polls of a batch answered ahead of the server's middleware (core/api/polls.py): the
same bytes, the same rules, and nothing but an unchanged batch answered there."""

from __future__ import annotations

import os
import time

import openai
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from core.api.keys import create_key
from core.api.polls import BatchPolls, batch_polls
from core.api.routes import api_routes
from core.config import data_paths
from core.schemas import JobStatus
from tests.support.api import (
    _ended_batch,
    _job_with_status,
    _result,
    _walk,
    assert_openai_error,
    own,
)

reached: list[str] = []


class Tripwire:
    """Stands where Streamlit's middleware stands: notes each request that gets there."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            reached.append(f"{scope['method']} {scope['path']}")
        await self.app(scope, receive, send)


@pytest.fixture
def served(studio_home):
    reached.clear()
    app = Starlette(routes=api_routes(), middleware=[batch_polls(), Middleware(Tripwire)])
    with TestClient(app, base_url="http://testserver") as client:
        yield client


@pytest.fixture
def keys(studio_home) -> dict[str, str]:
    return {name: create_key(data_paths().home, name) for name in ("alice", "bob")}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_a_poll_of_an_unchanged_batch_skips_the_middleware_with_the_routes_bytes(
    served, keys, model
):
    alive = {"pid": os.getpid(), "heartbeat_at": time.time()}  # a worker that is running
    running = _walk(
        JobStatus(total=3, done=1, succeeded=1, **alive), "created", "queued", "running"
    )
    job = _job_with_status(data_paths().home, model, running, [_result("r0", True)], [])
    own(job, "alice")
    path = f"/v1/batches/{job.job_id}"
    first = served.get(path, headers=_auth(keys["alice"]))
    assert reached == [f"GET {path}"]  # read once through the routes
    alice = openai.OpenAI(
        base_url="http://testserver/v1", api_key=keys["alice"], http_client=served
    )

    polls = [alice.batches.with_raw_response.retrieve(job.job_id) for _ in range(20)]

    assert reached == [f"GET {path}"]  # 20 polls answered ahead of the middleware...
    assert {p.content for p in polls} == {first.content}  # ...with the routes' bytes
    assert {p.headers["content-type"] for p in polls} == {first.headers["content-type"]}
    assert polls[0].parse().request_counts.completed == 1  # the SDK's Batch type
    status = _walk(JobStatus(total=3, done=3, succeeded=3, **alive), "created", "queued", "running")
    job.write_status(status)
    assert alice.batches.retrieve(job.job_id).status == "finalizing"  # a change: the routes
    assert reached == [f"GET {path}"] * 2


def test_a_poll_the_memory_cannot_answer_gets_the_routes_answer(served, keys, model):
    job = _ended_batch(data_paths().home, model, "alice")
    path = f"/v1/batches/{job.job_id}"
    assert served.get(path, headers=_auth(keys["alice"])).status_code == 200
    reached.clear()
    assert_openai_error(served.get(path, headers=_auth(keys["bob"])), 404)  # not bob's
    assert_openai_error(served.get(path), 401)  # no key, not on loopback
    assert_openai_error(served.get(path, headers=_auth("bs-wrong")), 401)
    assert_openai_error(served.get(path + "/nothing", headers=_auth(keys["alice"])), 404)
    assert_openai_error(served.get("/v1/batches/job_none", headers=_auth(keys["alice"])), 404)
    assert_openai_error(served.post(path + "/cancel", headers=_auth(keys["alice"])), 400)
    assert len(reached) == 6  # each went through the middleware to the routes


def test_the_server_answers_polls_ahead_of_streamlits_middleware():
    import server

    assert server.app._user_middleware[0].cls is BatchPolls


def test_a_full_collection_in_the_server_skips_what_its_imports_made():
    import gc

    import server  # noqa: F401 (its import freezes what was made so far)

    assert gc.get_freeze_count() > 50_000
