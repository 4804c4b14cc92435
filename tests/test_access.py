"""Who may come in: sign-in with OpenID Connect, an allow-list, no open network by default.

The browser tests start a real OpenID Connect provider (``oidc-provider-mock``) on this
machine and sign in through its form, as a user would.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from urllib.parse import quote

import httpx
import oidc_provider_mock
import pytest
from playwright.sync_api import Page, expect

from core.access import allowed, exposure_problem, is_loopback, sign_in_configured
from core.config import data_paths
from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig
from tests.browser_support import StreamlitServer, free_port, kill_workers, open_page, screenshot
from tests.conftest import run_cli
from tests.factories import finished_job, request_line


def test_the_allow_list_admits_listed_emails_and_whole_domains_only():
    users = ["alice@example.com", "@team.example"]
    assert allowed("Alice@Example.com", users)
    assert allowed("bob@team.example", users)
    assert not allowed("bob@example.com", users)
    assert not allowed("mallory@evil-team.example.org", users)
    assert not allowed("", users) and not allowed("alice@example.com", [])


def test_only_loopback_is_served_without_sign_in():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback(None) and not is_loopback("10.1.2.3")
    assert exposure_problem("127.0.0.1", sign_in=False, open_override=False) is None
    assert "will not serve on 0.0.0.0" in exposure_problem("0.0.0.0", False, False)
    assert exposure_problem("0.0.0.0", sign_in=True, open_override=False) is None
    assert exposure_problem("0.0.0.0", sign_in=False, open_override=True) is None
    assert "every network interface" in exposure_problem(None, False, False)


def test_sign_in_is_read_from_a_secrets_file_with_an_auth_section(tmp_path):
    secrets_file = tmp_path / "secrets.toml"
    assert not sign_in_configured((secrets_file,))
    secrets_file.write_text("[other]\nx = 1\n")
    assert not sign_in_configured((secrets_file,))
    secrets_file.write_text('[auth]\nclient_id = "x"\n')
    assert sign_in_configured((secrets_file,))


def test_serve_refuses_an_open_address_without_sign_in(studio_home):
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert result.returncode == 2
    assert "will not serve on 0.0.0.0 without sign-in" in result.stderr


def test_a_job_records_its_owner(studio_home, tmp_path, monkeypatch):
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    batch = tmp_path / "b.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    submission = Submission(engine=EngineConfig(model=str(model)), owner="Alice")
    job = submit(batch, submission, data_paths().jobs).job
    assert job.read_spec().provenance["owner"] == "Alice"


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


def _secrets(path: Path, app_url: str, issuer: str, users: list[str]) -> Path:
    quoted = ", ".join(f'"{u}"' for u in users)
    path.write_text(
        "[auth]\n"
        f'redirect_uri = "{app_url}/oauth2callback"\n'
        f'cookie_secret = "{secrets.token_hex(16)}"\n'
        'client_id = "batch-studio"\n'
        'client_secret = "test-secret"\n'
        f'server_metadata_url = "{issuer}/.well-known/openid-configuration"\n'
        "[access]\n"
        f"allowed_users = [{quoted}]\n"
    )
    return path


def _sign_in(page: Page, url: str, sub: str) -> None:
    page.goto(url)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_placeholder("sub").fill(sub)
    page.get_by_role("button", name="Authorize").click()


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
