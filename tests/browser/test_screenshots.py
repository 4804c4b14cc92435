"""The browser tests' screenshots (and so the docs' pictures) show a page that has settled.

No app server is needed: chromium shows a page with Streamlit's busy markers (a skeleton,
the status widget, the app's script state), and ``screenshot`` must wait for them, within
a bound.
"""

from __future__ import annotations

import time

import pytest
from PIL import Image

from tests.support.browser import SETTLE_SECONDS, SHOOT_ENV, screenshot

GREEN = (0, 160, 0)


@pytest.fixture(autouse=True)
def shooting(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about the shots themselves: they save them, as `make screenshots`."""
    monkeypatch.setenv(SHOOT_ENV, "1")


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

# The app's script running (its root's state, as the server reports it) for 1.5 s with
# nothing busy on show yet, then the (green) table it was computing.
RUNNING = """
<div data-testid="stApp" data-test-script-state="running"
     data-test-connection-state="CONNECTED">
  <div id="slot" style="width:600px;height:400px;background:#fff"></div>
</div>
<script>
  setTimeout(() => {
    document.getElementById("slot").style.background = "rgb(0,160,0)";
    document.querySelector("[data-testid=stApp]").dataset.testScriptState = "notRunning";
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
def test_a_screenshot_waits_for_the_apps_script_to_finish_its_run(chromium_page) -> None:
    chromium_page.set_content(RUNNING)
    path = screenshot(chromium_page, "settle_script_ran")
    with Image.open(path) as image:
        assert image.convert("RGB").getpixel((300, 200)) == GREEN, "shot while the script ran"


@pytest.mark.browser
def test_a_screenshot_of_a_page_that_never_settles_is_taken_after_a_bounded_wait(
    chromium_page,
) -> None:
    chromium_page.set_content(NEVER_SETTLES)
    started = time.monotonic()
    path = screenshot(chromium_page, "settle_never")
    waited = time.monotonic() - started
    assert path is not None and path.is_file()
    assert SETTLE_SECONDS <= waited < SETTLE_SECONDS + 10, f"waited {waited:.1f} s"
