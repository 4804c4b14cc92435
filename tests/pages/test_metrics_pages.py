"""Monitor's summary of every job shows the figures ``GET /metrics`` serves, from the same
read of the job folders (issue 41 item 4; the scrape's own tests: tests/unit/test_metrics.py)."""

from __future__ import annotations

from tests.support.metrics import loopback, scrape, studio, total
from tests.support.pages import metric, open_page, texts


def test_monitor_shows_the_studios_figures_that_metrics_serves(studio_home):
    jobs = studio(studio_home)
    with loopback() as client:
        scraped = scrape(client)
    at = open_page("monitor.py", job_id=jobs["finished"].job_id)
    shown = {
        label: metric(at, label)
        for label in ("Jobs running", "Jobs queued", "Lines queued", "Requests in the engine",
                      "Output tokens", "Answers reused")
    }  # fmt: skip
    served = {
        "Jobs running": total(scraped, "batch_studio_jobs", state="running"),
        "Jobs queued": total(scraped, "batch_studio_jobs", state="queued"),
        "Lines queued": total(scraped, "batch_studio_queued_lines"),
        "Requests in the engine": total(scraped, "batch_studio_running_requests"),
        "Output tokens": total(scraped, "batch_studio_generation_tokens_total"),
        "Answers reused": total(scraped, "batch_studio_reused_answers_total"),
    }
    assert shown == {label: f"{int(v):,}" for label, v in served.items()}
    # By hand: one running, one queued of 4 lines, 3 requests in the engine, 3 answers of
    # 3 output tokens each.
    assert shown == {
        "Jobs running": "1", "Jobs queued": "1", "Lines queued": "4",
        "Requests in the engine": "3", "Output tokens": "9", "Answers reused": "0",
    }  # fmt: skip
    assert "Failure lines by error code: engine_rejected 1." in texts(at)
