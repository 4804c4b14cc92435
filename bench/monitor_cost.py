"""CPU the UI process spends on the live Monitor page, against an idle page.

Usage::

    .venv/bin/python bench/monitor_cost.py [--seconds 30]

Starts ``streamlit run app.py`` on a private data folder holding one job that a stand-in
process keeps "running" (a fresh heartbeat, progress and resource samples every 2 s, no
engine), opens the Monitor page in headless chromium, and reads the Streamlit process's
CPU time over the interval; then the same with the Settings page (no live refresh) open.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
from playwright.sync_api import sync_playwright

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.run.monitoring import append_samples, progress_sample  # noqa: E402
from core.schemas import JobStatus  # noqa: E402
from tests.support.jobs import finished_job  # noqa: E402

REFRESH = "2 s (st.fragment(run_every=2.0), pages/monitor.py)"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]  # fmt: skip


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fake_worker(job_dir: Path, seconds: float) -> None:
    """Keeps a job looking alive: heartbeat, progress and samples every 2 s."""
    from core.jobs.folder import JobFolder

    job = JobFolder(job_dir)
    deadline = time.time() + seconds
    done = 0
    while time.time() < deadline:
        done += 1
        job.write_status(
            JobStatus(state="running", total=10_000, done=done, succeeded=done,
                      completion_tokens=done * 30, pid=os.getpid(), heartbeat_at=time.time())
        )  # fmt: skip
        resources = {"rss_mib": 900.0, "cpu_percent": 180.0}
        append_samples(job.metrics, [progress_sample(done, done * 30, resources)])
        time.sleep(2)


def measure(url: str, server: psutil.Process, seconds: float, page_path: str) -> float:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page()
        page.goto(f"{url}/{page_path}")
        page.wait_for_timeout(8000)  # let the page settle before measuring
        before = server.cpu_times()
        page.wait_for_timeout(seconds * 1000)
        after = server.cpu_times()
        browser.close()
    used = (after.user - before.user) + (after.system - before.system)
    return 100 * used / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    home = scratch_folder("monitor-home-")
    job = finished_job(home, {"a": "yes"})
    keeper = subprocess.Popen(
        [sys.executable, "-c",
         f"import sys; sys.path.insert(0, {str(REPO)!r}); from bench.monitor_cost import "
         f"fake_worker; from pathlib import Path; fake_worker(Path({str(job.path)!r}), 600)"],
        cwd=REPO,
    )  # fmt: skip
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
         "--server.headless", "true"],
        cwd=REPO, env={**os.environ, "BATCH_STUDIO_HOME": str(home)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(6)
        url = f"http://127.0.0.1:{port}"
        process = psutil.Process(server.pid)
        monitor = measure(url, process, args.seconds, "monitor")
        idle = measure(url, process, args.seconds, "settings")
    finally:
        server.terminate()
        keeper.terminate()
    print(f"monitor refresh: {REFRESH}")
    print(f"UI process CPU with Monitor open on a running job: {monitor:.1f}% of one core")
    print(f"UI process CPU with Settings open (no refresh):    {idle:.1f}% of one core")


if __name__ == "__main__":
    main()
