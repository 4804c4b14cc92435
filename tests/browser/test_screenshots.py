"""The browser tests' screenshots (and so the docs' pictures) show a page that has settled.

No app server is needed: chromium shows a page with Streamlit's busy markers (a skeleton,
the status widget), and ``screenshot`` must wait for them, within a bound.
"""

from __future__ import annotations

import time

import pytest
from PIL import Image

from tests.support.browser import SETTLE_SECONDS, screenshot

GREEN = (0, 160, 0)

# A grey Streamlit skeleton where a table will be, replaced by the (green) table after 1.5 s.
DRAWING = """
<div id="slot" style="width:600px;height:400px">
  <div data-testid="stSkeleton" style="width:600px;height:400px;background:#ccc"></div>
</div>
<script>
  setTimeout(() => {
    document.getElementById("slot").innerHTML =
      '<div style="width:600px;height:400px;background:rgb(0,160,0)">the table</div>';
  }, 1500);
</script>
"""

# A status widget that never goes (a Monitor refreshing itself, a lost connection).
NEVER_SETTLES = '<div data-testid="stStatusWidget" style="height:40px">Connecting</div>'


@pytest.mark.browser
def test_a_screenshot_shows_the_table_not_the_skeleton_drawn_while_it_loads(
    chromium_page,
) -> None:
    chromium_page.set_content(DRAWING)
    path = screenshot(chromium_page, "settle_skeleton_replaced")
    with Image.open(path) as image:
        assert image.convert("RGB").getpixel((300, 200)) == GREEN, "shot before the table came"


@pytest.mark.browser
def test_a_screenshot_of_a_page_that_never_settles_is_taken_after_a_bounded_wait(
    chromium_page,
) -> None:
    chromium_page.set_content(NEVER_SETTLES)
    started = time.monotonic()
    path = screenshot(chromium_page, "settle_never")
    waited = time.monotonic() - started
    assert path.is_file()
    assert SETTLE_SECONDS <= waited < SETTLE_SECONDS + 10, f"waited {waited:.1f} s"
