"""The browser tests of tests/unit/test_access.py (split from it by kind; docs/tests.md).

Who may come in: sign-in with OpenID Connect, an allow-list, no open network by default.

The browser tests start a real OpenID Connect provider (``oidc-provider-mock``) on this
machine and sign in through its form, as a user would."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import oidc_provider_mock
import pytest
from playwright.sync_api import expect

from tests.support.browser import StreamlitServer, free_port, kill_workers, open_page, screenshot
from tests.support.jobs import finished_job
from tests.support.sign_in import _secrets, _sign_in


@pytest.mark.browser
def test_the_app_refuses_to_serve_an_open_address_without_sign_in(tmp_path, chromium_page):
    server = StreamlitServer(tmp_path / "home", tmp_path, address="0.0.0.0")
    try:
        server.start()
        chromium_page.goto(server.url)
        expect(
            chromium_page.get_by_text("will not serve on 0.0.0.0 without sign-in")
        ).to_be_visible()
        expect(chromium_page.get_by_role("link", name="Upload & check")).to_have_count(0)
        screenshot(chromium_page, "access-open-address-refused")
    finally:
        server.stop()


@pytest.mark.browser
def test_a_page_opened_by_its_address_on_a_fresh_server_passes_the_guard(tmp_path, chromium_page):
    """The first page a fresh server runs is Streamlit's old mode of a pages/ folder (the
    page's file alone): it must still go through the app's sign-in guard, not show."""
    server = StreamlitServer(tmp_path / "home", tmp_path, address="0.0.0.0")
    try:
        server.start()
        chromium_page.goto(f"{server.url}/results")
        expect(
            chromium_page.get_by_text("will not serve on 0.0.0.0 without sign-in")
        ).to_be_visible()
        expect(chromium_page.get_by_role("heading", name="Results")).to_have_count(0)
    finally:
        server.stop()


@pytest.mark.browser
def test_sign_in_with_openid_connect_admits_the_allow_list_only(tmp_path, chromium_page):
    page = chromium_page
    with oidc_provider_mock.run_server_in_thread() as provider:
        issuer = f"http://localhost:{provider.server_port}"
        for email, name in (("alice@example.com", "Alice Analyst"), ("bob@else.test", "Bob")):
            reply = httpx.put(f"{issuer}/users/{quote(email)}", json={"email": email, "name": name})
            assert reply.status_code == 204
        port = free_port()
        app_url = f"http://127.0.0.1:{port}"
        secrets_file = _secrets(tmp_path / "secrets.toml", app_url, issuer, ["alice@example.com"])
        finished_job(tmp_path / "home", {"a": "yes"})  # so Review has a job to label
        extra = ("--secrets.files", str(secrets_file))
        server = StreamlitServer(tmp_path / "home", tmp_path, port=port, extra_args=extra)
        try:
            server.start()
            page.goto(app_url)
            expect(page.get_by_text("Sign in to use the studio.")).to_be_visible()
            expect(page.get_by_role("link", name="Upload & check")).to_have_count(0)

            _sign_in(page, app_url, "alice@example.com")
            expect(page.get_by_text("Signed in as Alice Analyst")).to_be_visible(timeout=60_000)
            open_page(page, "Review")
            reviewer = page.get_by_label("Your name (labels are kept per reviewer)")
            expect(reviewer).to_have_value("Alice Analyst")  # the signed-in name, fixed
            expect(reviewer).to_be_disabled()
            screenshot(page, "access-signed-in")

            page.get_by_role("button", name="Sign out").click()
            page.get_by_role("button", name="End session").click()  # the provider's own page
            expect(page.get_by_text("Sign in to use the studio.")).to_be_visible()
            _sign_in(page, app_url, "bob@else.test")
            expect(page.get_by_text("may not use this studio")).to_be_visible(timeout=60_000)
            expect(page.get_by_role("link", name="Upload & check")).to_have_count(0)
            screenshot(page, "access-not-on-the-list")
        finally:
            server.stop()
            kill_workers(server.home)
