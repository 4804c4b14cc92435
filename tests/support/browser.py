"""What the browser tests share: a Streamlit server that can be stopped and started again on
the same data folder, headless Debian chromium, screenshots, and a few Streamlit widgets.

Its fixtures (``studio_server``, ``chromium_page``) and its hook closing the shared chromium
are imported into ``tests/conftest.py``. A module's tests share one server (its data folder
emptied before each test) and the run's browser tests one chromium (a fresh context each).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Browser, Locator, Page, Playwright, expect, sync_playwright
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from core.config import REPO_ROOT
from core.jobs.engine_files import IDLE_ENV, read_state
from core.jobs.engine_lock import LOCK_NAME
from core.jobs.folder import QUEUE_MARK
from core.run.pool import MULTIPROCESSING_ENV

SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
# Set (to anything but "" or "0"), the browser tests save their shots; `make screenshots`
# sets it. Unset, a shot only waits for the page to settle: its PNG, made as tall as the
# page, cost about 0.8 s of CPU each, 52 in a run (issue 56).
SHOOT_ENV = "BATCH_STUDIO_SCREENSHOTS"
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

# The sidebar's pages (app.py) and the title each shows.
PAGES = {
    "Build": "Build a batch file",
    "Upload & check": "Upload & check",
    "Run": "Run",
    "Monitor": "Monitor",
    "Results": "Results",
    "Review": "Review",
    "Checks": "Checks",
    "Compare": "Compare",
    "Dashboards": "Dashboards",
    "Jobs": "Jobs",
    "Settings": "Settings",
    "Experiments": "Experiments",  # last: the walk's screenshots of the others keep their numbers
}


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class StreamlitServer:
    """``streamlit run server.py``, the pages with the Batch API and /media's sign-in (with
    ``serve``: ``python -m core serve``, which runs the same), on one port and one data
    folder, in its own process group.

    ``stop`` signals the whole group, as a terminal's Ctrl-C or a service manager would: a
    worker the app started in its own session must survive it.
    """

    def __init__(
        self,
        home: Path,
        log_dir: Path,
        port: int | None = None,
        address: str = "127.0.0.1",
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        serve: bool = False,
        script: str = "server.py",
    ) -> None:
        self.home, self.serve, self.script = home, serve, script
        self.address, self.extra_args, self.env = address, extra_args, env or {}
        self.port = port or free_port()
        host = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address
        self.url = f"http://{host}:{self.port}"
        self.log_dir = log_dir
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def log(self) -> Path:
        return self.log_dir / f"streamlit-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        env = {**os.environ, "BATCH_STUDIO_HOME": str(self.home), **self.env}
        command = [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            self.script,
            "--server.port",
            str(self.port),
            "--server.address",
            self.address,
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            *self.extra_args,
        ]
        if self.serve:  # what `make run` starts: server.py, the pages and /v1
            command = [sys.executable, "-m", "core", "serve", "--host", self.address]
            command += ["--port", str(self.port)]
        with self.log.open("wb") as log_handle:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=env,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + SERVER_START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(
                    f"streamlit exited with {self.process.returncode}:\n{self.log.read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as response:
                    if response.read().decode().strip() == "ok":
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.3)
        log = self.log.read_text()
        pytest.fail(f"streamlit not healthy after {SERVER_START_SECONDS} s:\n{log}")

    def restart(self) -> None:
        """A freshly started server process, on the same port and data folder."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """SIGTERM to the server's process group; SIGKILL after 10 s."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def worker_pids(home: Path) -> list[int]:
    """PIDs of the live ``core.run.worker`` processes named by job folders under ``home``
    (each once: a resident worker runs several jobs)."""
    pids = set()
    for status_file in (home / "jobs").glob("*/status.json"):
        pid = json.loads(status_file.read_text(encoding="utf-8")).get("pid")
        if pid and _is_worker(pid):
            pids.add(pid)
    return sorted(pids)


def _is_worker(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return "core.run.worker" in process.cmdline() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def kill_workers(home: Path) -> None:
    """Kills every worker a job folder under ``home`` names, and its resident worker, if
    they still run."""
    state = read_state(home)
    resident = [state.pid] if state is not None and _is_worker(state.pid) else []
    for pid in sorted({*worker_pids(home), *resident}):
        try:
            process = psutil.Process(pid)
            process.kill()
            process.wait(timeout=10)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.TimeoutExpired):
            pass


def worker_busy(home: Path) -> bool:
    """Whether a worker runs a job in ``home`` (one idle with its models loaded is not)."""
    state = read_state(home)
    idle = state is not None and state.state == "idle"
    return bool(worker_pids(home)) and not idle


# `make screenshots` names a folder with a plain path for the server's files, so that the
# docs' pictures show /tmp/batch-studio-demo/home/inbox, not a pytest temporary path.
SHOTS_DIR = "BATCH_STUDIO_SHOTS_DIR"


def server_folder(tmp_path: Path) -> Path:
    """``tmp_path``, or the emptied folder ``$BATCH_STUDIO_SHOTS_DIR`` (under the system's
    temporary folder only: it is wiped for each server)."""
    named = os.environ.get(SHOTS_DIR)
    if not named:
        return tmp_path
    folder = Path(named).resolve()
    if not folder.is_relative_to(Path(tempfile.gettempdir()).resolve()):
        pytest.fail(f"{SHOTS_DIR}={named} is wiped by the tests: name a folder under /tmp")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


# What a resident worker holds in a data folder while it waits for jobs: the engine's lock
# (a new file would be a second engine), the queue's mark and its state.
WORKER_FILES = (Path("jobs") / LOCK_NAME, Path("jobs") / QUEUE_MARK, Path("engine") / "state.json")


def reset_home(home: Path) -> None:
    """Empties a running server's data folder between tests, as a user deleting files would:
    every file and job goes, but the folders stay (the server's watchers watch ``jobs/`` and
    the inbox) and so do the index (``studio.duckdb``, open in the server: it forgets a
    job whose folder is gone on the next page's run) and the resident worker's files."""
    keep = {home / name for name in WORKER_FILES}
    for entry in home.iterdir() if home.is_dir() else ():
        if entry.name.startswith("studio.duckdb"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            for child in entry.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child not in keep:
                    child.unlink()
        else:
            entry.unlink()


# The module's jobs run on one resident worker, as an analyst's do while the studio serves:
# a model is loaded once per module, not once per job. In-process (one model at a time):
# the cold start of a model is a third shorter than beside others (core.run.pool).
RESIDENT_ENV = {IDLE_ENV: "3600", MULTIPROCESSING_ENV: "0"}


@pytest.fixture(scope="module")
def module_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StreamlitServer]:
    """One app per test module (per xdist worker): a server start and the pages' first
    imports cost seconds, paid once; ``studio_server`` resets it for each test. The workers
    it starts stay resident (``RESIDENT_ENV``) until the module ends."""
    folder = server_folder(tmp_path_factory.mktemp("studio"))
    server = StreamlitServer(folder / "home", folder, env=RESIDENT_ENV)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        kill_workers(server.home)


@pytest.fixture
def studio_server(module_server: StreamlitServer) -> Iterator[StreamlitServer]:
    """The module's app with an emptied data folder; a worker still running a job is killed
    at the end (an idle one keeps its model for the module's next job). A test may stop and
    start it (same port and folder): it is started again if it was left down. A test that
    needs a freshly started server calls ``restart`` on it."""
    server = module_server
    if not server.running:
        server.start()
    reset_home(server.home)
    try:
        yield server
    finally:
        if worker_busy(server.home):
            kill_workers(server.home)


class _Chromium:
    """The test run's one chromium (per xdist worker), started by the first page asked for.

    It is closed whenever the next test is not a browser test (``pytest_runtest_teardown``):
    a started Playwright keeps its asyncio loop marked running in the main thread, where
    ``asyncio.run`` of a later test would refuse to start."""

    playwright: Playwright | None = None
    browser: Browser | None = None

    @classmethod
    def get(cls) -> Browser:
        if cls.browser is None or not cls.browser.is_connected():
            executable = shutil.which("chromium")
            if executable is None:
                pytest.fail("chromium is not installed: `apt-get install chromium` (Debian's)")
            cls.close()
            cls.playwright = sync_playwright().start()
            cls.browser = cls.playwright.chromium.launch(
                executable_path=executable, headless=True, args=CHROMIUM_ARGS
            )
        return cls.browser

    @classmethod
    def close(cls) -> None:
        browser, playwright = cls.browser, cls.playwright
        cls.browser = cls.playwright = None
        try:
            if browser is not None:
                browser.close()
        finally:
            if playwright is not None:
                playwright.stop()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Closes the shared chromium after the last of a run of browser tests (imported into
    tests/conftest.py, which makes it a hook)."""
    if nextitem is None or nextitem.get_closest_marker("browser") is None:
        _Chromium.close()


@pytest.fixture
def chromium_page() -> Iterator[Page]:
    """A page of headless Debian chromium, driven by Playwright, in a fresh browser context
    (no cookies or storage of another test); the run's one chromium is shared."""
    browser = _Chromium.get()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(30_000)
        expect.set_options(timeout=30_000)  # a 2-core machine running an engine is slow
        yield page
    finally:
        for opened in list(browser.contexts):  # the test's own, and any it opened beside
            opened.close()


# -- pages and widgets --------------------------------------------------------------------------


# Streamlit is still drawing while any of these shows: a grey skeleton where an element is
# yet to come, a spinner, an element left stale by a rerun, or the status widget (it appears
# half a second into a run, or while the connection is lost).
BUSY = (
    "[data-testid^=stSkeleton], .stSkeleton, [data-testid=stSpinner],"
    " [data-testid=stStatusWidget], [data-stale=true]"
)
SETTLE_SECONDS = 6.0  # at most this long; a page that never settles is shot as it is
# The app's own state, on its root element: whether its script runs (from the server's
# message, so a run shows at once, not half a second in as the status widget does) and
# whether it is connected. Quiet this long with neither busy, a page is drawn.
QUIET_SECONDS = 0.5
PAGE_STATE = """busy => {
  const app = document.querySelector('[data-testid=stApp]');  // none: not the app's page
  if (app && !app.dataset.testConnectionState?.endsWith('CONNECTED')) return 'gone';
  const script = app?.dataset.testScriptState ?? 'notRunning';
  if (script !== 'notRunning' && script !== 'compilationError') return 'busy';
  return [...document.querySelectorAll(busy)].some(e => e.getClientRects().length > 0)
    ? 'busy' : 'quiet';
}"""


def settle(page: Page, timeout: float = SETTLE_SECONDS) -> bool:
    """Waits until the app's script is not running and nothing of ``BUSY`` is shown for
    ``QUIET_SECONDS``; False after ``timeout`` (a Monitor refreshing itself), or as soon as
    the page has been cut off from its server that long (nothing more comes to draw),
    rather than hanging the test."""
    deadline = time.monotonic() + timeout
    since, last = time.monotonic(), None
    while time.monotonic() < deadline:
        state = page.evaluate(PAGE_STATE, BUSY)
        if state != last:
            since, last = time.monotonic(), state
        elif state != "busy" and time.monotonic() - since >= QUIET_SECONDS:
            return state == "quiet"
        time.sleep(0.05)
    return False


# Two frames painted: the layout at a new window size is done (the window only grows taller,
# so no element changes its width; a chart or grid drawn at its width stays as it is).
PAINTED = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def shooting() -> bool:
    return os.environ.get(SHOOT_ENV, "") not in ("", "0")


def screenshot(page: Page, name: str) -> Path | None:
    """Saves the whole page as ``test-output/screenshots/<name>.png``, once it has settled,
    where the run saves shots (``$BATCH_STUDIO_SCREENSHOTS``); else only waits as for one.

    Streamlit scrolls inside its main block, not the document, so a full-page screenshot
    would stop at the window: the window is made as tall as the content for the shot.
    """
    settle(page)
    if not shooting():
        return None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    size = page.viewport_size or {"width": 1400, "height": 1000}
    content = page.evaluate(
        "() => document.querySelector('[data-testid=stMain]')?.scrollHeight ?? 0"
    )
    tall = min(max(int(content), size["height"]), 8000)
    if tall > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": tall})
        page.evaluate(PAINTED)
        settle(page, timeout=2)  # what the new height brings into view drawn
    try:
        page.screenshot(path=str(path), full_page=True)
    finally:
        if tall > size["height"]:
            page.set_viewport_size(size)
    return path


# Whether the app's script runs, by the state Streamlit keeps on its root element (from the
# server's messages: a run shows as soon as the page hears of it, where the status widget
# only appears half a second into a run), or the status widget shows.
SCRIPT_BUSY = """() => {
  const app = document.querySelector('[data-testid=stApp]');
  const script = app?.dataset.testScriptState ?? 'notRunning';
  if (script !== 'notRunning' && script !== 'compilationError') return true;
  const status = document.querySelector('[data-testid=stStatusWidget]');
  return !!status && status.getClientRects().length > 0;
}"""
IDLE_QUIET_SECONDS = 0.6  # quiet this long and no run seen: the action started none
RAN_QUIET_SECONDS = 0.25  # quiet this long after a run seen to end: no run follows it


def wait_idle(page: Page, timeout: float = 30) -> None:
    """Waits until the app's script is not running (no "Running..." status) for a moment.

    Quiet for ``IDLE_QUIET_SECONDS`` when no run was seen (an action's run can start that
    late); a run seen to end needs ``RAN_QUIET_SECONDS`` more of quiet (a rerun it asked
    for, or a widget's value sent back on drawing, starts within it)."""
    deadline = time.monotonic() + timeout
    quiet_since, ran = None, False
    while time.monotonic() < deadline:
        try:
            busy = page.evaluate(SCRIPT_BUSY)
        except PlaywrightError:  # the page navigates: its new document is yet to run
            busy = None
        if busy is None:
            quiet_since = None
        elif busy:
            quiet_since, ran = None, True
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > (RAN_QUIET_SECONDS if ran else IDLE_QUIET_SECONDS):
            return
        time.sleep(0.05)


def expect_no_exception(page: Page) -> None:
    """No Streamlit exception box (a page that raised shows one)."""
    expect(page.get_by_test_id("stException")).to_have_count(0)


def open_page(page: Page, label: str) -> None:
    """Clicks ``label`` in the sidebar and waits for that page's title, without an error."""
    page.get_by_test_id("stSidebarNav").get_by_role("link", name=label, exact=True).click()
    expect_title(page, PAGES[label])


def expect_title(page: Page, title: str, timeout: float = 30_000) -> None:
    expect(page.get_by_role("heading", name=title, exact=True, level=1)).to_be_visible(
        timeout=timeout
    )
    wait_idle(page)
    expect_no_exception(page)


def choose(page: Page, label: str, option: str, tries: int = 4) -> None:
    """Picks ``option`` in the selectbox or multiselect labelled ``label``, and waits until
    the widget shows it (a selectbox's value, a multiselect's tag).

    A rerun that lands while the list is open (a download finishing, a fragment's timer)
    draws the widget again: the open list detaches, or a click on it is dropped by
    Streamlit's list (the widget shows no new choice), so the list is opened again until
    the widget shows the choice. A click that times out never reached the option, and a
    pick is tried again only while the widget does not show it, so a multiselect's option
    is never toggled twice. A choice the widget showed and then lost is not picked again:
    the test's next check sees it.
    """
    box = page.get_by_role("combobox", name=label, exact=True)
    item = page.get_by_role("option", name=option, exact=True)
    for attempt in range(tries):
        wait_idle(page)
        if attempt and _shows(page, box, option, timeout=1):
            break  # the last pick took, after a slow redraw
        box.click()
        try:
            item.click(timeout=5_000)
        except PlaywrightTimeoutError:
            if attempt == tries - 1:
                raise
            page.keyboard.press("Escape")
            continue
        if page.get_by_role("listbox").count():  # a multiselect's list stays open after a pick
            page.keyboard.press("Escape")
        if _shows(page, box, option):
            break
    else:
        pytest.fail(f"{label!r} does not show {option!r} after {tries} picks")
    wait_idle(page)


def _shows(page: Page, box: Locator, option: str, timeout: float = 5) -> bool:
    """Whether the select ``box`` shows ``option`` within ``timeout`` s: a selectbox's value,
    or one of a multiselect's tags."""
    tags = page.get_by_test_id("stMultiSelect").filter(has=box)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tags.count():
            shown = tags.get_by_test_id("stMultiSelectTagsContainer").inner_text()
            if option in [line.strip() for line in shown.splitlines()]:
                return True
        elif box.input_value() == option:
            return True
        time.sleep(0.1)
    return False


def pick_radio(page: Page, option: str) -> None:
    """Clicks ``option`` of a radio group."""
    page.get_by_test_id("stRadioGroup").get_by_text(option, exact=True).click()
    wait_idle(page)


def open_expander(page: Page, label: str) -> None:
    """Opens the expander titled ``label``."""
    expander = page.get_by_test_id("stExpander").filter(has_text=label).first
    expander.locator("summary").click()
    expect(expander.get_by_test_id("stExpanderDetails")).to_be_visible()


def type_into(page: Page, label: str | re.Pattern, text: str) -> None:
    """Types into a text input, text area or number input and commits it (Tab)."""
    box = (
        page.get_by_label(label, exact=True) if isinstance(label, str) else page.get_by_label(label)
    )
    box.fill(text)
    box.press("Tab")
    wait_idle(page)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> object:
    """Polls ``condition`` until it returns something true; fails with ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def progress_text(page: Page) -> str:
    """The Monitor's progress line, e.g. ``running: 12 / 64 requests``."""
    return page.get_by_test_id("stProgress").first.inner_text(timeout=30_000).strip()


def grid_rows(grid: Locator) -> list[list[str]]:
    """The rows of an ``st.dataframe`` as text, from the accessibility table the grid keeps
    under its canvas (glide-data-grid paints cells; it mirrors the rows in view). Waits for
    the first row: the mirror can fill after the page is idle (Jobs' table read empty once
    in a fresh-clone run)."""
    expect(grid.locator("tbody tr").first).to_be_attached(timeout=30_000)
    rows = []
    for row in grid.locator("tbody tr").all():
        rows.append([cell.inner_text().strip() for cell in row.locator("td").all()])
    return rows


PROGRESS = re.compile(r"(\w+): (\d+) / (\d+) requests")


def monitor_progress(page: Page) -> tuple[str, int, int]:
    """(state, done, total) as the Monitor's progress bar says."""
    match = PROGRESS.search(progress_text(page))
    assert match, progress_text(page)
    return match.group(1), int(match.group(2)), int(match.group(3))


GRID_ROW_PX = 35  # the height of a row (and of the header) in Streamlit's data grid


def edit_grid_cell(grid: Locator, row: int, column: int, text: str) -> None:
    """Types ``text`` into a cell of an ``st.data_editor`` as a person does.

    The grid (glide-data-grid) paints its cells on a canvas, so there is no element to
    click: the first cell of ``row`` (0 = the first row under the header) is clicked by
    position, the arrow keys move ``column`` cells right, Enter opens the cell's editor,
    the text is typed into it, and Enter commits it.
    """
    expect(grid.locator("canvas").first).to_be_visible()
    grid.click(position={"x": 12, "y": GRID_ROW_PX * (row + 1) + GRID_ROW_PX // 2})
    keyboard = grid.page.keyboard
    for _ in range(column):
        keyboard.press("ArrowRight")
    keyboard.press("Enter")
    editor = grid.page.get_by_test_id("portal").locator(".gdg-clip-region")
    expect(editor).to_be_visible()
    field = editor.locator("input, textarea").first
    field.fill(text)
    field.press("Enter")
    expect(editor).to_have_count(0)


def metric_value(page: Page, label: str) -> Locator:
    """The value of the ``st.metric`` labelled ``label``."""
    metric = page.get_by_test_id("stMetric").filter(
        has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True)
    )
    return metric.get_by_test_id("stMetricValue")
