"""End to end: the real app in headless chromium runs a sample batch on the real engine.

Needs Debian's ``chromium`` and the prepared default model; takes a minute or two on CPU.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from core.config import REPO_ROOT, SAMPLE_DATA

SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_SECONDS = 60
RUN_SECONDS = 240  # the CPU engine alone takes ~30 s to load


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_healthy(url: str, server: subprocess.Popen, log: Path) -> None:
    """Waits until Streamlit's health endpoint answers ``ok``, or fails with the server log."""
    deadline = time.monotonic() + SERVER_START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"streamlit exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.read().decode().strip() == "ok":
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"streamlit not healthy after {SERVER_START_SECONDS} s:\n{log.read_text()}")


def kill_workers(home: Path) -> None:
    """Kills every worker a job folder under ``home`` names, if it still runs."""
    for status_file in (home / "jobs").glob("*/status.json"):
        pid = json.loads(status_file.read_text(encoding="utf-8")).get("pid")
        if not pid:
            continue
        try:
            process = psutil.Process(pid)
            if "core.worker" in process.cmdline():
                process.kill()
                process.wait(timeout=10)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.TimeoutExpired):
            pass


@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[str]:
    """``streamlit run app.py`` on a free port with a private data folder; yields its URL."""
    home = tmp_path / "home"
    port = free_port()
    log = tmp_path / "streamlit.log"
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home)}
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        "app.py",
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
    ]
    with log.open("wb") as log_handle:
        server = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log_handle, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server, log)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        kill_workers(home)


@pytest.fixture
def chromium_page() -> Iterator[Page]:
    """A page of headless Debian chromium, driven by Playwright."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: `apt-get install chromium` (Debian's package)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def screenshot(page: Page, name: str) -> None:
    """Saves the whole page as ``test-output/screenshots/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


@pytest.mark.browser
@pytest.mark.engine
def test_upload_run_and_read_results_in_the_browser(app_url: str, chromium_page: Page) -> None:
    page = chromium_page
    page.goto(app_url)
    expect(page.get_by_role("heading", name="Upload & check")).to_be_visible(timeout=30_000)
    page.locator("input[type=file]").set_input_files(SAMPLE_DATA / "review_sentiment.jsonl")
    expect(page.get_by_text("All 16 lines are valid.")).to_be_visible(timeout=30_000)
    screenshot(page, "1_upload")

    page.get_by_role("link", name=re.compile("Continue to Run")).click()
    expect(page.get_by_role("heading", name="Run")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("16 valid of 16 lines")).to_be_visible()
    screenshot(page, "2_run")
    page.get_by_role("button", name="Start run").click()
    expect(page.get_by_text("completed: 16 / 16 requests")).to_be_visible(
        timeout=RUN_SECONDS * 1000
    )
    results_link = page.get_by_role("link", name=re.compile("Open results"))
    expect(results_link).to_be_visible(timeout=30_000)
    screenshot(page, "3_run_completed")

    results_link.click()
    expect(page.get_by_role("heading", name="Results")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("16 results (first 16 shown)")).to_be_visible(timeout=30_000)
    # st.dataframe is glide-data-grid: it paints cells on a canvas and mirrors only the cells
    # in view (first rows, first columns) into a hidden accessibility table. So the table is
    # checked by its first custom_id there (which also waits for the lazily loaded grid), and
    # the rest by DOM text: the caption counts the job's rows in DuckDB, the metrics its state.
    grid = page.get_by_test_id("stDataFrame")
    expect(grid.get_by_text("review-sentiment:R-2001", exact=True)).to_have_count(1)
    succeeded = page.get_by_test_id("stMetric").filter(has_text="Succeeded")
    expect(succeeded.get_by_test_id("stMetricValue")).to_have_text("16")
    expect(page.get_by_role("button", name="Download output JSONL")).to_be_visible()
    screenshot(page, "4_results")
