"""Signing in to the pages through a real OpenID Connect provider (tests of access and media)."""

from __future__ import annotations

import secrets
from pathlib import Path

from playwright.sync_api import Page


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
