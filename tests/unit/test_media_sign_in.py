"""Downloads need the pages' sign-in (issue 31, item 6).

With sign-in on, the URL of a signed-in user's download (``/media/<id>``) fetched with no
cookie returned the job's data. The middleware in core/api/media.py now checks the
session's signed cookie first; the browser test signs in through a real OpenID Connect
provider, as tests/unit/test_access.py does, and fetches the download's URL with and without
the session.
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from streamlit.web.server.server_util import get_cookie_secret
from streamlit.web.server.starlette.starlette_app_utils import create_signed_value

from core.api.media import MediaSignIn

USER_COOKIE = "_streamlit_user"


def _media_app() -> TestClient:
    async def media(request):
        return PlainTextResponse("the job's data")

    app = Starlette(routes=[Route("/media/{rest:path}", media), Route("/other", media)])
    app.add_middleware(MediaSignIn)
    return TestClient(app)


def _cookie(**user: object) -> str:
    value = json.dumps({"origin": "http://testserver", **user})
    return create_signed_value(get_cookie_secret(), USER_COOKIE, value).decode()


def test_a_download_needs_an_allowed_signed_in_session(monkeypatch):
    monkeypatch.setattr("core.api.media._sign_in", lambda: (True, ["alice@example.com"]))
    client = _media_app()
    assert client.get("/media/abc.bin").status_code == 401
    assert client.get("/other").status_code == 200  # only downloads are guarded here
    alice = _cookie(is_logged_in=True, email="alice@example.com")
    assert client.get("/media/abc.bin", cookies={USER_COOKIE: alice}).text == "the job's data"
    for refused in (
        _cookie(is_logged_in=True, email="bob@else.test"),  # signed in, not on the list
        _cookie(is_logged_in=False, email="alice@example.com"),  # signed out
        alice[:-3] + "xyz",  # a forged signature
    ):
        assert client.get("/media/abc.bin", cookies={USER_COOKIE: refused}).status_code == 401


def test_without_sign_in_downloads_are_open_as_the_pages_are(monkeypatch):
    monkeypatch.setattr("core.api.media._sign_in", lambda: (False, []))
    assert _media_app().get("/media/abc.bin").text == "the job's data"
