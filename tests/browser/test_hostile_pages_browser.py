"""The browser tests of tests/pages/test_hostile_pages.py (split from it by kind; docs/tests.md).

Text from a file or a model is shown as text on every page, never as markdown.

A hostile batch carries a markdown image (which a browser would fetch) and a link in its
custom_id, prompt, answer, metadata and error message, and in its job's name. On every
page those texts may appear in plain-text elements (st.text, st.code, tables); in any
element that reads markdown (alerts, captions, headings, labels) they must arrive escaped,
so no link or image is ever made."""

from __future__ import annotations

import pytest

from tests.support.hostile_pages import LINK, ROWS
from tests.support.jobs import finished_job

pytestmark = pytest.mark.usefixtures("studio_home")


@pytest.mark.browser
def test_no_page_fetches_what_a_hostile_batch_points_to_or_anything_outside(
    studio_server, chromium_page
):
    from tests.support.browser import expect_no_exception, open_page, screenshot

    page = chromium_page
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    finished_job(studio_server.home, ROWS)
    page.goto(studio_server.url)
    pages = ("Results", "Jobs", "Monitor", "Dashboards", "Compare", "Review", "Build", "Run")
    for label in (*pages, "Upload & check", "Settings"):
        open_page(page, label)
        page.wait_for_timeout(500)  # images and links render after the script's last delta
        expect_no_exception(page)
        assert page.locator('a[href*="127.0.0.1:9"], img[src*="127.0.0.1:9"]').count() == 0
        if label == "Results":
            screenshot(page, "hostile-results")
            assert page.get_by_text(LINK).count() >= 1  # the error message, as text
    assert [url for url in fetched if "127.0.0.1:9/" in url] == []
    # The studio runs offline: nothing, not even an icon, is fetched from another host.
    local = (studio_server.url, "data:", "blob:")
    assert [url for url in fetched if not url.startswith(local)] == []
