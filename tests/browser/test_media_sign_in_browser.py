"""The browser tests of tests/unit/test_media_sign_in.py (split from it by kind; docs/tests.md).

Downloads need the pages' sign-in (issue 31, item 6).

With sign-in on, the URL of a signed-in user's download (``/media/<id>``) fetched with no
cookie returned the job's data. The middleware in core/api/media.py now checks the
session's signed cookie first; the browser test signs in through a real OpenID Connect
provider, as tests/unit/test_access.py does, and fetches the download's URL with and without
the session."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx
import oidc_provider_mock
import pytest
from playwright.sync_api import expect

from tests.support.browser import StreamlitServer, free_port, kill_workers, open_page, wait_idle
from tests.support.jobs import finished_job
from tests.support.sign_in import _secrets, _sign_in


@pytest.mark.browser
def test_a_signed_in_users_download_url_gives_nothing_without_the_session(
    tmp_path: Path, chromium_page
):
    page = chromium_page
    with oidc_provider_mock.run_server_in_thread() as provider:
        issuer = f"http://localhost:{provider.server_port}"
        email = "alice@example.com"
        reply = httpx.put(f"{issuer}/users/{quote(email)}", json={"email": email, "name": "Alice"})
        assert reply.status_code == 204
        port = free_port()
        app_url = f"http://127.0.0.1:{port}"
        secrets_file = _secrets(tmp_path / "secrets.toml", app_url, issuer, [email])
        job = finished_job(tmp_path / "home", {"a": "yes"})
        extra = ("--secrets.files", str(secrets_file))
        server = StreamlitServer(tmp_path / "home", tmp_path, port=port, extra_args=extra)
        server.start()
        try:
            _sign_in(page, app_url, email)
            expect(page.get_by_text("Signed in as Alice")).to_be_visible(timeout=60_000)
            open_page(page, "Results")
            wait_idle(page)
            with page.expect_download() as download:
                page.get_by_role("button", name="Download output JSONL").click()
            url = download.value.url
            assert "/media/" in url
            data = (job.path / "output.jsonl").read_bytes()
            assert Path(download.value.path()).read_bytes() == data  # the session's own
            stranger = httpx.get(url)
            assert stranger.status_code == 401 and data not in stranger.content
            assert page.context.request.get(url).body() == data  # with the session: served
        finally:
            server.stop()
            kill_workers(server.home)
