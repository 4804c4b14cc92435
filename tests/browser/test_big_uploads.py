"""Large uploads (issue 31, item 5): a browser upload is saved to disk and Streamlit's
in-memory copy dropped, so the app's memory comes back; the page's uploader takes up to
``server.maxUploadSize`` and says where bigger files go."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import expect

from tests.support.browser import StreamlitServer, expect_title, wait_idle

LINES = 2_000
PROMPT_CHARS = 95_000  # 2,000 lines of ~95 kB: about 190 MB, under the 200 MB cap


def app_rss_mb(server: StreamlitServer) -> float:
    """The app process's resident memory (its children, if any, are not the app)."""
    return psutil.Process(server.process.pid).memory_info().rss / 2**20


def settled_rss_mb(server: StreamlitServer, at_most: float = 4.0) -> float:
    """The app's memory once it stops growing (two readings half a second apart within
    1 MB), read for at most ``at_most`` s: a baseline read early is lower, never higher."""
    deadline = time.monotonic() + at_most
    last = app_rss_mb(server)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = app_rss_mb(server)
        if abs(now - last) < 1:
            return now
        last = now
    return last


def rss_back_mb(server: StreamlitServer, before: float, within: float = 4.0) -> float:
    """The app's memory as soon as it is within 100 MB of ``before``, or as it is after
    ``within`` s (what the test asserts on)."""
    deadline = time.monotonic() + within
    while True:
        now = app_rss_mb(server)
        if now - before < 100 or time.monotonic() >= deadline:
            return now
        time.sleep(0.2)


def big_blank_file(path: Path) -> Path:
    """About 190 MB of blank lines: the check reads them at once and keeps nothing, so what
    the app keeps afterwards is the upload's own cost (a check of 190 MB of requests keeps
    about 390 MB by itself, uploaded or not: measured apart, reported in the issue)."""
    with path.open("w", encoding="utf-8") as out:
        for _ in range(LINES):
            out.write(" " * PROMPT_CHARS + "\n")
    return path


@pytest.mark.browser
def test_a_big_upload_goes_to_disk_and_the_apps_memory_comes_back(
    studio_server: StreamlitServer, chromium_page, tmp_path: Path
) -> None:
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    wait_idle(page)
    before = settled_rss_mb(studio_server)
    batch = big_blank_file(tmp_path / "big.jsonl")
    page.locator("input[type=file]").set_input_files(batch)
    # checked: its one problem, "no request lines", is listed
    expect(page.get_by_role("heading", name="Problems")).to_be_visible(timeout=120_000)
    wait_idle(page)
    after = rss_back_mb(studio_server, before)
    saved = list((studio_server.home / "uploads").glob("*_big.jsonl"))
    assert len(saved) == 1 and saved[0].stat().st_size == batch.stat().st_size
    print(
        f"app RSS before {before:.0f} MB, after a {batch.stat().st_size / 2**20:.0f} MB "
        f"upload {after:.0f} MB"
    )
    assert after - before < 100, (before, after)


@pytest.mark.browser
def test_an_upload_over_the_cap_is_refused_in_the_browser_and_the_page_says_where_to_go(
    studio_server: StreamlitServer, chromium_page, tmp_path: Path
) -> None:
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    expect(page.get_by_text("Uploads up to 200 MB", exact=False)).to_be_visible()
    expect(page.get_by_text("POST /v1/files", exact=False)).to_be_visible()
    wait_idle(page)
    before = settled_rss_mb(studio_server, 2.0)
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as out:  # 300 MB, sparse: the browser refuses it by its size
        out.truncate(300 * 2**20)
    page.locator("input[type=file]").set_input_files(huge)
    expect(page.get_by_text("200", exact=False).filter(has_text="MB or smaller")).to_be_visible()
    assert not list((studio_server.home / "uploads").glob("*huge*"))
    assert rss_back_mb(studio_server, before, 2.0) - before < 100
