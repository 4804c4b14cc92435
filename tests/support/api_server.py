"""What the tests split from tests/unit/test_api_server.py by kind share (docs/tests.md)."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.support.browser import StreamlitServer, kill_workers
from tests.support.jobs import request_line

POLL_SECONDS = 0.5
NO_KEY = {"Authorization": ""}  # what the SDK sends then: no key (docs/api.md)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamlitServer]:
    folder = tmp_path_factory.mktemp("served")
    server = StreamlitServer(folder / "home", folder, serve=True)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        kill_workers(server.home)


@pytest.fixture(scope="module")
def warm_served(
    warm_engine_home: Path,
    warm_engine_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[StreamlitServer]:
    """A ``core serve`` on the session's warm home (tests/support/warm_engine.py): its
    batches run on the resident worker that keeps the built-in models loaded, which the
    session's end stops, not this server's."""
    server = StreamlitServer(
        warm_engine_home,
        tmp_path_factory.mktemp("warm-served"),
        env=warm_engine_env,  # the warm worker's, should a batch of its start it
        serve=True,
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()


def client_of(server: StreamlitServer, key: str | None = None) -> openai.OpenAI:
    """What a pipeline written for OpenAI changes: the base URL, and the key (None: no key,
    this machine's user; the SDK insists on a key, so an empty header stands for none)."""
    if key is None:
        return openai.OpenAI(
            base_url=f"{server.url}/v1", api_key="none", default_headers=NO_KEY, max_retries=0
        )
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def chats(count: int, max_tokens: int = 8) -> io.BytesIO:
    """``count`` greedy chats, none of them asked before on this server: each is run on
    the engine, never answered from an earlier batch (docs/reuse.md)."""
    batch = uuid.uuid4().hex[:8]
    lines = [
        request_line(
            f"q{i}", f"Count to {i % 7 + 2} (batch {batch}, line {i}).", max_tokens=max_tokens,
            temperature=0,
        )
        for i in range(count)
    ]  # fmt: skip
    return io.BytesIO(("\n".join(lines) + "\n").encode())
