"""Downloads need the pages' sign-in.

A page's download button is served from ``/media/<id>``; anyone holding that URL could
fetch the job's data. With sign-in on, this middleware on the same server lets a
``/media`` request through only with the signed-in session's cookie (Streamlit's own
signed ``_streamlit_user`` cookie, for an allowed user): the download expires with the
session, as the cookie does at sign-out or at its age limit.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from core.access import allowed

MEDIA_PREFIX = "/media/"


def _sign_in() -> tuple[bool, list[str]]:
    """Whether sign-in is configured, and the allow-list (Streamlit's secrets)."""
    import streamlit as st

    try:
        if "auth" not in st.secrets:
            return False, []
        access = st.secrets.get("access") or {}
        return True, list(access.get("allowed_users", []))
    except FileNotFoundError:
        return False, []


def signed_in_email(cookies: dict[str, str]) -> str | None:
    """The email of the session the cookies belong to; None without a valid signed one."""
    from streamlit.auth_util import get_cookie_with_chunks
    from streamlit.web.server.server_util import get_cookie_secret
    from streamlit.web.server.starlette.starlette_app_utils import decode_signed_value
    from streamlit.web.server.starlette.starlette_server_config import USER_COOKIE_NAME

    secret = get_cookie_secret()

    def single(name: str) -> bytes | None:
        raw = cookies.get(name)
        return None if raw is None else decode_signed_value(secret, name, raw.encode("latin-1"))

    decoded = get_cookie_with_chunks(single, USER_COOKIE_NAME)
    if not decoded:
        return None
    try:
        payload: Any = json.loads(decoded)
    except ValueError:
        return None
    if not isinstance(payload, dict) or not payload.get("is_logged_in"):
        return None
    email = payload.get("email")
    return email if isinstance(email, str) else None


class MediaSignIn:
    """ASGI middleware: ``/media`` answers 401 without an allowed signed-in session when
    sign-in is configured; every other path passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith(MEDIA_PREFIX):
            sign_in, allowed_users = _sign_in()
            if sign_in:
                email = signed_in_email(dict(HTTPConnection(scope).cookies))
                if not allowed(email, allowed_users):
                    response = PlainTextResponse(
                        "Sign in to the studio to download this file.", status_code=401
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def media_sign_in() -> Middleware:
    return Middleware(MediaSignIn)
