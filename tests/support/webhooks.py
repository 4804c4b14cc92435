"""A webhook receiver on 127.0.0.1 (a real HTTP server in a thread) that records what it
is sent and answers with the statuses it is told, and a port nobody listens on."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]


@dataclass
class Receiver:
    url: str
    answers: list[int]  # the statuses to answer, in turn; then 200
    received: list[Received] = field(default_factory=list)

    def wait_for(self, count: int, seconds: float = 60.0) -> list[Received]:
        """The requests once ``count`` have come (or what came within ``seconds``)."""
        deadline = time.monotonic() + seconds
        while len(self.received) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.received)


@contextmanager
def receiver(*answers: int) -> Iterator[Receiver]:
    """A receiver answering ``answers`` in turn, then 200."""
    state = Receiver(url="", answers=list(answers))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            state.received.append(Received(body, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(state.answers.pop(0) if state.answers else 200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hooks"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks"
