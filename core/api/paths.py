"""Paths under ``/v1`` that Streamlit's path check would refuse, refused the API's way.

Streamlit's own middleware answers a path holding ``..``, a NUL or an absolute path (an
id sent as ``%2F..`` or ``%00``) with a plain-text "Bad Request", which the SDKs cannot
read. This middleware, ahead of Streamlit's, answers such a path under ``/v1`` with
OpenAI's error body instead, by the same test (so nothing Streamlit refuses reaches a
route), and hands every other request on unchanged.
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.types import ASGIApp, Receive, Scope, Send
from streamlit.path_security import is_unsafe_path_pattern

from core.api.errors import error_response

API_PREFIX = "/v1/"


def refused_path(path: str) -> bool:
    """Whether an API path is one Streamlit's path check refuses."""
    return path.startswith(API_PREFIX) and is_unsafe_path_pattern(path.lstrip("/"))


class ApiPaths:
    """ASGI middleware: an unsafe ``/v1`` path gets OpenAI's 404 (see above)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not refused_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        shown = scope["path"][:100]
        reply = error_response(
            404,
            f"Invalid URL ({scope['method']} {shown!r}): no file, batch or model id holds "
            "'..', a NUL or a drive or share name.",
            code="unknown_url",
        )
        await reply(scope, receive, send)


def api_paths() -> Middleware:
    return Middleware(ApiPaths)
