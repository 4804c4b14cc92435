"""Polls of a batch, answered ahead of the server's middleware.

Clients poll ``GET /v1/batches/{id}`` over and over (50 clients ten times a second is a
normal load), on the server that also runs the pages and shares the machine's cores with
the engine. Streamlit's middleware (path checks, sessions, gzip), Starlette's routing and
a ``Request`` cost several times the answer itself, so this middleware, the outermost one,
answers a poll of an unchanged job with the bytes kept for it (:mod:`core.api.batch_view`)
and hands every other request, and every poll it cannot answer so (a changed job, a
refusal), to the routes, unchanged.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send

from core.api.batch_view import kept_body
from core.api.errors import ApiError
from core.api.routes import caller_of
from core.config import data_home

POLL_PREFIX = "/v1/batches/"
_JSON = (b"content-type", b"application/json")


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return ""


def kept_poll(scope: Scope) -> bytes | None:
    """The body of a ``GET /v1/batches/{id}`` answered from memory, or None when the routes
    must answer it (not such a poll, a changed job, a refusal)."""
    if scope["type"] != "http" or scope["method"] != "GET":
        return None
    path: str = scope["path"]
    if not path.startswith(POLL_PREFIX):
        return None
    home = data_home()
    client = scope.get("client")
    try:
        who = caller_of(home, _header(scope, b"authorization"), client[0] if client else None)
    except ApiError:
        return None
    return kept_body(home, path[len(POLL_PREFIX) :], who)


class BatchPolls:
    """ASGI middleware: a poll of an unchanged batch answered from memory (see above)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = kept_poll(scope)
        if body is None:
            await self.app(scope, receive, send)
            return
        headers = [(b"content-length", str(len(body)).encode()), _JSON]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def batch_polls() -> Middleware:
    return Middleware(BatchPolls)
