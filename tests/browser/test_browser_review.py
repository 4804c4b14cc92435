"""Issue 30, items 10 and 11, in chromium: labelling by key on Review, timed from the key to
the next item in the browser, and the typed-text search saying it works.

:func:`label_walk` runs here on a made-up job (no engine) and, in
``test_restart_cancel_kill_resume_run_in_the_browser``, while a worker runs a job.
:func:`typed_text_search_shows_work` runs in the embeddings journey (it needs the engine).
"""

from __future__ import annotations

import pytest

from tests.support.browser import (
    StreamlitServer,
    expect_title,
)
from tests.support.browser_review import label_walk
from tests.support.jobs import finished_job


@pytest.mark.browser
@pytest.mark.serial  # times keys to the next item
def test_labelling_by_key_shows_the_next_item_at_once_in_the_browser(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30, item 10: P/F/U and the reviewer's own labels save and show the next item,
    and keys 1-5 mark the score: the keys' medians within 200 ms, or within twice a plain
    move's redraw on a slower host, and no key past three times that (:meth:`Walk.check`)."""
    rows = [
        {"custom_id": f"q{i}", "prompt": f"Question {i}?", "answer": f"A{i}"} for i in range(12)
    ]
    made = finished_job(studio_server.home.parent / "build", rows)
    (studio_server.home / "jobs").mkdir(parents=True, exist_ok=True)
    made.path.rename(studio_server.home / "jobs" / made.job_id)
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    label_walk(page, studio_server.home, "review_keys", made.job_id).check()
