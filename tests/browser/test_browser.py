"""End to end: the real app in headless chromium, on the real engine.

Needs Debian's ``chromium`` and the prepared default model. Screenshots of each step and of
every page land in ``test-output/screenshots/`` (with ``BATCH_STUDIO_SCREENSHOTS=1``, as
``make screenshots`` runs it). The module's jobs run on the server's
resident worker (``module_server``), one model at a time: the chat model is loaded twice
(the first job; the resume after a killed worker), and the embedding model once, last.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import Page, expect

from core.config import SAMPLE_DATA, default_model_dir
from core.jobs.engine_files import read_state
from tests.support.browser import (
    PAGES,
    StreamlitServer,
    choose,
    edit_grid_cell,
    expect_no_exception,
    expect_title,
    grid_rows,
    metric_value,
    monitor_progress,
    open_expander,
    open_page,
    pick_radio,
    screenshot,
    type_into,
    wait_for,
    wait_idle,
    worker_pids,
)
from tests.support.browser_review import label_walk, typed_text_search_shows_work
from tests.support.experiments import capitals, capitals_answer, experiment_in_home
from tests.support.jobs import finished_job

ENGINE_SECONDS = 300  # a worker start (engine load) and a few requests, on a busy machine
COPIES = 6  # review_sentiment.jsonl's 16 requests, 6 times: 96 requests
OUTPUT_TOKENS = 24  # per request (min_tokens = max_tokens), so the run lasts a while
ENGINE_WINDOW = re.compile(r"^Requests inside the engine at once")


def long_batch(folder: Path) -> Path:
    """The sentiment sample, ``COPIES`` times over with fixed-length answers: a run long
    enough to restart the app and cancel it in the middle of it.

    Each copy's prompt differs: identical requests are answered once and the copies reuse
    that answer, so 96 copies of 16 requests ran as 16 and job A could finish while the
    app restarted (Monitor then showed "completed", never "running" one further)."""
    lines = (SAMPLE_DATA / "review_sentiment.jsonl").read_text(encoding="utf-8").splitlines()
    path = folder / f"review_sentiment_x{COPIES}.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for copy in range(COPIES):
            for raw in lines:
                request = json.loads(raw)
                request["custom_id"] += f"#{copy}"
                request["body"]["messages"][-1]["content"] += f" (copy {copy})"
                request["body"]["max_tokens"] = OUTPUT_TOKENS
                request["body"]["min_tokens"] = OUTPUT_TOKENS
                handle.write(json.dumps(request, ensure_ascii=False) + "\n")
    return path


def engine_idle(home: Path) -> bool:
    """Whether the resident worker waits for a job (what Settings' engine state says)."""
    state = read_state(home)
    return state is not None and state.state == "idle"


def current_job(home: Path) -> Path:
    """The newest job folder (job ids start with their creation time)."""
    return max((home / "jobs").glob("job_*"))


def job_status(job: Path) -> dict:
    """A job's ``status.json``, read from its folder as the worker wrote it."""
    return json.loads((job / "status.json").read_text(encoding="utf-8"))


def one_request_at_a_time(page: Page) -> None:
    """On Run: one request inside the engine at a time, so results come one by one (a run
    to act on half-way) instead of all at the end of one engine step."""
    open_expander(page, "Engine settings")
    type_into(page, ENGINE_WINDOW, "1")


def wait_progress(page: Page, *, state: str, at_least: int, timeout: float) -> int:
    """Waits until the Monitor's live progress shows ``state`` and ``at_least`` done."""

    last: list[tuple[str, int, int]] = []  # what it showed last, for the failure

    def reached() -> int | None:
        last[:] = [monitor_progress(page)]
        shown, done, _ = last[0]
        return done if shown == state and done >= at_least else None

    try:
        return int(wait_for(reached, timeout, f"Monitor to show {state} with {at_least} done"))
    except pytest.fail.Exception as failed:
        pytest.fail(f"{failed.msg}; it showed {last}")


@pytest.mark.browser
def test_build_and_check_in_the_browser(studio_server: StreamlitServer, chromium_page) -> None:
    """Build a batch file from the sample table, check it; then upload a broken file and
    see its problems by line number."""
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")

    open_page(page, "Build")
    pick_radio(page, "Use the sample table")
    expect(page.get_by_text("tickets.csv: 40 rows", exact=False)).to_be_visible()
    choose(page, "Id column", "ticket_id")
    type_into(page, "User prompt template (Jinja2)", "{{ subject }}: {{ body }}")
    type_into(page, "max_tokens", "8")
    expect(page.get_by_text("39 of 40 rows become lines.")).to_be_visible()
    expect(page.get_by_text("1 row has problems", exact=False)).to_be_visible()
    preview = page.get_by_test_id("stCode").first
    expect(preview).to_contain_text('"custom_id": "tickets:T-2001"')
    expect(preview).to_contain_text("Charged twice this month: I see two charges")
    screenshot(page, "build_1_preview")

    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved tickets.jsonl: 39 of 40 rows written.")).to_be_visible()
    expect_no_exception(page)
    built = studio_server.home / "uploads" / "tickets.jsonl"
    lines = [json.loads(line) for line in built.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == 39
    assert lines[0]["custom_id"] == "tickets:T-2001"
    assert lines[0]["body"]["max_tokens"] == 8
    screenshot(page, "build_2_saved")

    page.get_by_role("button", name="Check it on Upload & check").click()
    expect_title(page, "Upload & check")
    server_path = page.get_by_role("textbox", name="Path of a batch file on this server")
    expect(server_path).to_have_value(str(built))
    expect(page.get_by_text("All 39 lines are valid.")).to_be_visible()
    expect(page.get_by_role("link", name=re.compile("Continue to Run"))).to_be_visible()
    screenshot(page, "build_3_checked")

    pick_radio(page, "Upload a file")
    page.locator("input[type=file]").set_input_files(SAMPLE_DATA / "broken_batch.jsonl")
    expect(page.get_by_text("7 of 11 lines are invalid.", exact=False)).to_be_visible()
    wait_idle(page)
    expect_no_exception(page)
    invalid = page.get_by_test_id("stMetric").filter(has_text="Invalid")
    expect(invalid.get_by_test_id("stMetricValue")).to_have_text("7")
    problems = page.get_by_test_id("stDataFrame").first  # the estimate's tables come later
    expect(problems.locator("th").first).to_have_text("line")
    expect(problems.locator("tbody tr")).to_have_count(7)
    by_line = {row[0]: row for row in grid_rows(problems)}
    assert sorted(by_line, key=int) == ["3", "4", "6", "7", "8", "9", "10"]
    assert "not valid JSON" in by_line["3"][-1]
    assert by_line["10"][2] == "ticket-summary:T-5010"
    assert "'robot'" in by_line["10"][-1]
    screenshot(page, "check_broken_file")


@pytest.mark.browser
@pytest.mark.engine
def test_restart_cancel_kill_resume_run_in_the_browser(
    studio_server: StreamlitServer, chromium_page, tmp_path: Path
) -> None:
    """Two jobs on the default model, two engine loads in all:

    A (a long batch): start → the app's server stops and starts again while the worker runs
    on → the new server's Monitor catches up from the job folder → Cancel.
    B (the sentiment sample): start, on A's worker with its model loaded → that worker is
    killed (interrupted) → the studio resumes it by itself (issue 38, item 3) → 100% →
    Results. Then every page of the sidebar in its state after the runs.
    """
    page, server, home = chromium_page, studio_server, studio_server.home
    batch = long_batch(tmp_path)
    total = COPIES * 16
    rows = [
        {"custom_id": f"q{i}", "prompt": f"Question {i}?", "answer": f"A{i}"} for i in range(12)
    ]
    made = finished_job(tmp_path / "made", rows)  # labelled while a worker runs (item 10)
    (home / "jobs").mkdir(parents=True, exist_ok=True)
    made_id = made.path.rename(home / "jobs" / made.job_id).name

    # -- A: start a long run --------------------------------------------------------------------
    page.goto(server.url)
    expect_title(page, "Upload & check")
    page.locator("input[type=file]").set_input_files(batch)
    expect(page.get_by_text(f"All {total} lines are valid.")).to_be_visible()
    screenshot(page, "run_1_upload")
    page.get_by_role("link", name=re.compile("Continue to Run")).click()
    expect_title(page, "Run")
    expect(page.get_by_text(f"{total} valid of {total} lines")).to_be_visible()
    expect(page.get_by_role("combobox", name="Model")).to_have_value("SmolLM2-135M-Instruct")
    one_request_at_a_time(page)
    screenshot(page, "run_2_settings")
    page.get_by_role("button", name="Start run").click()
    expect_title(page, "Monitor")
    job_a = current_job(home)
    done = wait_progress(page, state="running", at_least=1, timeout=ENGINE_SECONDS)
    screenshot(page, "run_3_monitor_running")

    # -- the app's server stops and starts again; the worker runs on ------------------------------
    (worker,) = worker_pids(home)
    server.stop()
    assert not server.running
    assert worker_pids(home) == [worker], "the worker died with the app's server"
    on_disk = wait_for(
        lambda: job_status(job_a)["done"] if job_status(job_a)["done"] > done else None,
        ENGINE_SECONDS,
        "the worker to write results while the app is down",
    )
    # The page notices the lost connection (a "Connection error" dialog, in time).
    lost = page.get_by_text(re.compile("Connection error|Is Streamlit still running")).first
    lost.wait_for(timeout=20_000)
    screenshot(page, "run_4_server_stopped")
    server.start()
    page.goto(server.url)  # not /monitor: see the report on deep links after a restart
    expect_title(page, "Upload & check")
    open_page(page, "Monitor")
    # The new server knows only the job folder: it shows what the worker did meanwhile.
    state, shown, shown_total = monitor_progress(page)
    assert (state, shown_total) == ("running", total)
    assert shown >= on_disk
    wait_progress(page, state="running", at_least=shown + 1, timeout=ENGINE_SECONDS)
    assert worker_pids(home) == [worker]
    screenshot(page, "run_5_monitor_after_restart")

    # -- Cancel A ---------------------------------------------------------------------------------
    page.get_by_role("button", name="Cancel").click()
    # The engine stops at its next step: the results written before stay.
    cancelled = wait_progress(page, state="cancelled", at_least=1, timeout=ENGINE_SECONDS)
    assert cancelled < total, "the job finished before it could be cancelled"
    # The worker stops running A and waits, its model loaded, for the next job.
    wait_for(lambda: engine_idle(home), 30, "the worker to leave the job")
    expect(page.get_by_role("button", name="Resume")).to_be_visible()
    screenshot(page, "run_6_cancelled")

    # -- B: a sample on the default model; its worker is killed; Resume; 100% ----------------------
    open_page(page, "Upload & check")
    pick_radio(page, "Use a sample")
    choose(page, "Sample batch", "review_sentiment.jsonl")
    expect(page.get_by_text("All 16 lines are valid.")).to_be_visible()
    page.get_by_role("link", name=re.compile("Continue to Run")).click()
    expect_title(page, "Run")
    expect(page.get_by_text("16 valid of 16 lines")).to_be_visible()
    one_request_at_a_time(page)  # results one by one, so the worker can die half-way
    page.get_by_role("button", name="Start run").click()
    expect_title(page, "Monitor")
    job_b = current_job(home)
    assert job_b != job_a
    # Polled often, not every half second: on a fast CPU the sample's 16 short answers all
    # came within a second of the first, and a kill half a second later found B completed
    # (a fresh-clone run on an AVX-512 EPYC).
    deadline = time.monotonic() + ENGINE_SECONDS
    while job_status(job_b)["done"] < 1:
        assert time.monotonic() < deadline, f"no result of B after {ENGINE_SECONDS} s"
        time.sleep(0.02)
    (second,) = worker_pids(home)
    assert second == worker, "B did not run on the worker that had the model loaded"
    psutil.Process(second).kill()
    interrupted = wait_progress(page, state="interrupted", at_least=1, timeout=60)
    assert interrupted < 16, "the job finished before its worker could be killed"
    expect(page.get_by_text("The worker stopped without finishing", exact=False)).to_be_visible()
    expect(page.get_by_text("resumes the job by itself", exact=False)).to_be_visible()
    screenshot(page, "run_7_interrupted")
    # Issue 38, item 3: nobody clicks Resume; the studio starts a worker, which resumes it.
    wait_for(lambda: worker_pids(home), 60, "the worker the studio started to resume it")
    # Issue 30, item 10: labelling by key while the resumed worker loads and runs.
    # (Review's keys are timed by `bench/review.py --browser` on a quiet machine: here a
    # job runs beside another test, so only what the keys do is checked.)
    print(label_walk(page, home, "run_10_review_while_running", made_id).say())
    open_page(page, "Monitor")
    wait_progress(page, state="completed", at_least=16, timeout=ENGINE_SECONDS)
    bar = page.get_by_test_id("stProgress").first.get_by_role("progressbar")
    expect(bar).to_have_attribute("aria-valuenow", "100")
    expect(page.get_by_text("completed: 16 succeeded, 0 failed", exact=False)).to_be_visible()
    results_link = page.get_by_role("link", name=re.compile("Open results"))
    expect(results_link).to_be_visible()
    screenshot(page, "run_8_completed")
    states = [entry["state"] for entry in job_status(job_b)["history"]]
    assert states[-1] == "completed" and "queued" in states[1:-1], states
    output = (job_b / "output.jsonl").read_text(encoding="utf-8").splitlines()
    # The job's figures are the whole job's, over both runs, as the output file has them
    # (issue 30, item 2), and the resumed run's own are shown beside, labelled.
    tokens = sum(
        json.loads(line)["response"]["body"]["usage"]["completion_tokens"] for line in output
    )
    assert job_status(job_b)["completion_tokens"] == tokens
    expect(page.get_by_text(f"{tokens:,} output tokens in", exact=False)).to_be_visible()
    expect(page.get_by_text("over 2 runs", exact=False).first).to_be_visible()
    expect(page.get_by_text("the speeds and the ETA are this run's:", exact=False)).to_be_visible()
    assert sorted(json.loads(line)["custom_id"] for line in output) == sorted(
        json.loads(line)["custom_id"]
        for line in (SAMPLE_DATA / "review_sentiment.jsonl").read_text().splitlines()
    ), "each request has exactly one result after the resume"

    results_link.click()
    expect_title(page, "Results")
    expect(page.get_by_text("16 results (rows 1–16 shown)")).to_be_visible()
    grid = page.get_by_test_id("stDataFrame").first
    expect(grid.locator("td", has_text="review-sentiment:R-2001")).to_have_count(1)
    succeeded = page.get_by_test_id("stMetric").filter(has_text="Succeeded")
    expect(succeeded.get_by_test_id("stMetricValue")).to_have_text("16")
    expect(page.get_by_role("button", name="Download output JSONL")).to_be_visible()
    screenshot(page, "run_9_results")

    # -- every page after the runs, with an experiment's matrix (no engine: its answers made)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BATCH_STUDIO_HOME", str(home))
        experiment_in_home(default_model_dir(), capitals(), capitals_answer)
    for number, label in enumerate(PAGES, start=1):
        open_page(page, label)
        if label == "Experiments":
            verdict = "terse passes every check 76.7 points more often than plain (p < 0.001)"
            expect(page.get_by_text(verdict)).to_be_visible()
        slug = re.sub(r"\W+", "_", label.lower()).strip("_")
        screenshot(page, f"page_{number:02d}_{slug}")
        expect_no_exception(page)
        # the app's server was stopped mid-run: its index opens again, not set aside
        expect(page.get_by_text("The database could not be read")).to_have_count(0)


@pytest.mark.browser
def test_results_files_are_read_and_written_only_when_clicked(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Opening Results writes no file; the output file is read on click, the error file is
    prepared on click, and both downloads hold the job's lines (no engine: a made-up job)."""
    from tests.support.results import ROWS

    made = finished_job(studio_server.home.parent / "build", ROWS)
    (studio_server.home / "jobs").mkdir(parents=True, exist_ok=True)
    job = made.path.rename(studio_server.home / "jobs" / made.job_id)
    page = chromium_page
    page.goto(studio_server.url)
    open_page(page, "Results")
    expect(page.get_by_text("4 results (rows 1–4 shown)")).to_be_visible()
    assert not list(studio_server.home.glob("exports/*"))

    with page.expect_download() as output:
        page.get_by_role("button", name="Download output JSONL").click()
    assert Path(output.value.path()).read_bytes() == (job / "output.jsonl").read_bytes()

    wait_idle(page)
    with page.expect_download() as errors:  # written when clicked: one click
        page.get_by_role("button", name="Download error file").click()
    lines = Path(errors.value.path()).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["custom_id"] for line in lines] == ["b"]  # the one failure

    # Narrow the filter: the export follows it.
    choose(page, "Status", "succeeded")
    expect(page.get_by_text("3 results (rows 1–3 shown)")).to_be_visible()
    with page.expect_download() as export:
        page.get_by_role("button", name="Export CSV").click()  # one click
    exported = Path(export.value.path()).read_text(encoding="utf-8").splitlines()
    assert len(exported) == 1 + 3  # the header and the three successes
    expect_no_exception(page)


@pytest.mark.browser
def test_a_page_opened_by_its_address_on_a_fresh_server_has_the_apps_navigation(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """A bookmark or a reload after a restart: the page shows inside app.py's navigation,
    not Streamlit's old sidebar of the `pages/` folder's file names."""
    studio_server.restart()  # fresh: no page has run in it yet
    page = chromium_page
    page.goto(f"{studio_server.url}/results")
    expect_title(page, "Results")
    nav = page.get_by_test_id("stSidebarNav")
    expect(nav.get_by_role("link", name="Upload & check", exact=True)).to_be_visible()
    expect(nav.get_by_role("link", name="shared", exact=True)).to_have_count(0)
    assert page.url.endswith("/results")
    open_page(page, "Jobs")  # and the navigation works from there


# Every link the sidebar's navigation shows, from the first paint on: only app.py's pages.
RECORD_SIDEBAR_LINKS = """
window.__navSeen = new Set();
new MutationObserver(() => {
  document.querySelectorAll('[data-testid="stSidebarNav"] a').forEach((a) => {
    const icon = a.querySelector('[data-testid="stIconMaterial"]');
    window.__navSeen.add(a.textContent.replace(icon ? icon.textContent : "", "").trim());
  });
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


@pytest.mark.browser
def test_a_fresh_servers_sidebar_shows_only_the_apps_pages(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30, item 12: the first pages opened on a freshly started server list the app's
    pages from the first paint, and only them (Streamlit's old mode of a ``pages/`` folder
    would list every file in it, by file name, until app.py had run once)."""
    studio_server.restart()  # fresh: no page has run in it yet
    page = chromium_page
    page.add_init_script(RECORD_SIDEBAR_LINKS)
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    wait_idle(page)
    page.goto(f"{studio_server.url}/results")
    expect_title(page, "Results")
    wait_idle(page)
    seen = set(page.evaluate("[...window.__navSeen]"))
    assert seen, "the sidebar showed no links"
    assert seen <= set(PAGES), f"the sidebar showed {sorted(seen - set(PAGES))} as pages"


@pytest.mark.browser
def test_prices_typed_into_the_price_table_are_saved(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 13: prices typed into the table once vanished on saving, visible only in the
    browser. Type an input and an output price for the default model into the grid, save,
    and find them in prices.json; a fresh session prices the estimate from that file."""
    model = default_model_dir().name
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    pick_radio(page, "Use a sample")
    choose(page, "Sample batch", "review_sentiment.jsonl")
    expect(metric_value(page, "Cost")).to_have_text("no price")  # no price yet

    open_expander(page, "Price table and budget")
    grid = page.get_by_test_id("stDataFrame").filter(has_text=model).first
    edit_grid_cell(grid, 0, 1, "1000")  # Input / 1M tokens
    wait_idle(page)
    edit_grid_cell(grid, 0, 2, "2000")  # Output / 1M tokens
    wait_idle(page)
    expect(metric_value(page, "Cost")).not_to_have_text("no price")  # the edit took
    screenshot(page, "prices_1_typed")
    page.get_by_role("button", name="Save prices and budget").click()
    wait_idle(page)
    expect_no_exception(page)

    saved = json.loads((studio_server.home / "prices.json").read_text(encoding="utf-8"))
    assert saved["models"][model]["input_per_1m"] == 1000
    assert saved["models"][model]["output_per_1m"] == 2000

    page.goto(studio_server.url)  # a new session: only the saved file knows the prices
    expect_title(page, "Upload & check")
    pick_radio(page, "Use a sample")
    choose(page, "Sample batch", "review_sentiment.jsonl")

    def priced() -> tuple[str, str] | None:
        """The cost shown and the saved prices' cost of the tokens shown beside it, read
        together: the expected output tokens can move on a rerun (the reuse forecast's)."""
        tokens_in = int(metric_value(page, "Input tokens").inner_text().replace(",", ""))
        out = int(metric_value(page, "Output tokens (expected)").inner_text().replace(",", ""))
        cost = f"{(tokens_in * 1000 + out * 2000) / 1_000_000:,.2f} USD"
        shown = metric_value(page, "Cost").inner_text().strip()
        return (shown, cost) if shown == cost else None

    wait_idle(page)
    wait_for(priced, 30, "the estimate's cost to be its tokens at the saved prices")
    expect(page.get_by_text("cost: price per 1M tokens")).to_be_visible()
    screenshot(page, "prices_2_saved_estimate")


@pytest.mark.browser
def test_a_model_without_a_price_reads_no_price_and_the_tables_label_reads_as_typed(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 38, item 14: a model without prices showed 0.00 USD on Results, and the
    price table's label drew the model named * as a bullet (no engine: a made-up job)."""
    made = finished_job(studio_server.home.parent / "build", {"a": "yes", "b": "no"})
    (studio_server.home / "jobs").mkdir(parents=True, exist_ok=True)
    made.path.rename(studio_server.home / "jobs" / made.job_id)
    prices = {"models": {"other": {"input_per_1m": 1.0, "output_per_1m": 1.0}}}
    (studio_server.home / "prices.json").write_text(json.dumps(prices), encoding="utf-8")
    page = chromium_page
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    open_page(page, "Results")
    total = page.get_by_text(re.compile("^Cost of the 2 results in view"))
    expect(total).to_have_text("Cost of the 2 results in view: no price; no price for tiny")
    open_page(page, "Dashboards")
    label = "Price table (USD; the model named * prices the models not listed)"
    summary = page.get_by_test_id("stExpander").filter(has_text="Price table").locator("summary")
    expect(summary.get_by_role("paragraph")).to_have_text(label)
    expect(summary.locator("li, ul, em, strong")).to_have_count(0)  # no markdown drawn
    screenshot(page, "no_price_dashboards")


@pytest.mark.browser
def test_rules_edited_and_run_on_the_checks_page_show_a_pass_rate(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 17: write rules on the Checks page, run them, read each rule's pass rate, and
    find the rules saved in the job's folder (no engine: a made-up job)."""
    from tests.support.grading import ROWS, RULES

    made = finished_job(studio_server.home.parent / "build", ROWS)
    (studio_server.home / "jobs").mkdir(parents=True, exist_ok=True)
    job = made.path.rename(studio_server.home / "jobs" / made.job_id)
    page = chromium_page
    page.goto(studio_server.url)
    open_page(page, "Checks")
    type_into(page, "Rules (YAML or JSON)", "rules:\n  - name: x\n    type: nope\n")
    expect(page.get_by_text("unknown type 'nope'")).to_be_visible()
    expect(page.get_by_role("button", name="Run checks")).to_be_disabled()
    type_into(page, "Rules (YAML or JSON)", RULES)
    expect(page.get_by_text("3 rule(s):")).to_be_visible()
    page.get_by_role("button", name="Run checks").click()
    expect(page.get_by_text("saved in each job's folder")).to_be_visible()
    wait_idle(page)
    grid = page.get_by_test_id("stDataFrame").first
    rows = wait_for(
        lambda: [r for r in grid_rows(grid) if r and "mentions_refund" in r], 30, "pass rates"
    )
    screenshot(page, "checks_pass_rates")
    # passed, failed, not graded (the failed request), contradicted (judges only), then the
    # pass rate: 2 of 3 graded answers mention a refund (the grid's text mirror holds the
    # number it shows as 66.67%)
    assert rows[0][2:6] == ["2", "1", "1", "0"], rows
    assert float(rows[0][6]) == pytest.approx(2 / 3)
    assert (job / "rules.yaml").read_text(encoding="utf-8") == RULES
    expect_no_exception(page)


@pytest.mark.browser
def test_second_day_build_embeddings_check_reload_and_judge_template_in_the_browser(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30 in the browser, no engine: an embeddings batch built beside a chat batch of
    the same name is saved under a new name (8), checks and goes on to Run (1); a reload
    keeps the Build draft (9); on Checks, removing and re-adding the job keeps the judge
    template (9)."""
    made = finished_job(studio_server.home.parent / "build", {"a": "yes", "b": "no"})
    (studio_server.home / "jobs").mkdir(parents=True, exist_ok=True)
    made.path.rename(studio_server.home / "jobs" / made.job_id)
    page, uploads = chromium_page, studio_server.home / "uploads"
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")

    open_page(page, "Build")
    pick_radio(page, "Use the sample table")
    choose(page, "Id column", "ticket_id")
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved tickets.jsonl: 39 of 40 rows written.")).to_be_visible()
    chat = (uploads / "tickets.jsonl").read_text(encoding="utf-8")

    pick_radio(page, "Embeddings")
    choose(page, "Column to embed", "body")
    expect(page.get_by_text("saving writes tickets-2.jsonl instead", exact=False)).to_be_visible()
    screenshot(page, "second_day_1_build_name_taken")
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved tickets-2.jsonl: 39 of 40 rows written.")).to_be_visible()
    assert (uploads / "tickets.jsonl").read_text(encoding="utf-8") == chat  # not overwritten
    embed = uploads / "tickets-2.jsonl"
    assert json.loads(embed.read_text(encoding="utf-8").splitlines()[0])["url"] == "/v1/embeddings"

    page.get_by_role("button", name="Check it on Upload & check").click()
    expect_title(page, "Upload & check")
    expect(page.get_by_text("All 39 lines are valid.")).to_be_visible()
    expect(page.get_by_text("The valid lines are embeddings requests", exact=False)).to_be_visible()
    expect_no_exception(page)
    screenshot(page, "second_day_2_embeddings_checked")
    page.get_by_role("link", name=re.compile("Continue to Run")).click()
    expect_title(page, "Run")
    expect(page.get_by_text("39 valid of 39 lines")).to_be_visible()

    open_page(page, "Build")
    page.reload()  # a new session: the draft comes from the data folder
    expect_title(page, "Build a batch file")
    expect(page.get_by_role("radio", name="Embeddings")).to_be_checked()
    expect(page.get_by_role("combobox", name="Column to embed")).to_have_value("body")
    expect(page.get_by_role("combobox", name="Id column")).to_have_value("ticket_id")
    screenshot(page, "second_day_3_build_after_reload")

    open_page(page, "Checks")
    mine = "Is this answer right? {{ answer }}"
    type_into(page, "Judge template", mine)
    jobs = page.get_by_role("combobox", name="Jobs", exact=True)
    jobs.click()
    page.keyboard.press("Backspace")  # removes the job chosen
    page.keyboard.press("Escape")
    expect(page.get_by_text("Choose at least one job.")).to_be_visible()
    wait_idle(page)
    jobs.click()
    page.get_by_role("option").first.click()
    page.keyboard.press("Escape")
    wait_idle(page)
    expect(page.get_by_label("Judge template", exact=True)).to_have_value(mine)
    expect_no_exception(page)
    screenshot(page, "second_day_4_checks_template_kept")


@pytest.mark.browser
@pytest.mark.engine
def test_a_retried_jobs_figures_are_its_output_files_in_the_browser(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30, items 2 and 13: a job on the default model whose first run lost two of its
    four requests to an engine fault (scripted: a fault cannot be ordered from the real
    engine) is opened by its address on Monitor; Retry runs them on the real engine; the
    job's figures over both runs are those of its output file, and Results holds all four."""
    from unittest import mock

    from core.jobs.folder import create_job
    from core.run import worker
    from core.schemas import EngineConfig
    from tests.support.jobs import ScriptedExecutor, request_line

    home, page = studio_server.home, chromium_page
    batch = home.parent / "retry.jsonl"
    prompts = {"r1": "Say hello.", "r2": "Name a colour.", "r3": "Count to three.", "r4": "Hi!"}
    lines = [request_line(cid, text, max_tokens=12) for cid, text in prompts.items()]
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    job = create_job(batch, home / "jobs", EngineConfig(model=str(default_model_dir())))
    fault = ("engine_error", "the engine stopped")
    rows = {
        "r1": {"custom_id": "r1", "answer": "Hello.", "tokens": 2},
        "r2": {"custom_id": "r2", "answer": "Blue.", "tokens": 2},
        "r3": {"custom_id": "r3", "answer": None, "error": fault},
        "r4": {"custom_id": "r4", "answer": None, "error": fault},
    }
    first_run = ScriptedExecutor(rows, default_model_dir().name)
    with mock.patch.object(worker, "make_executor", lambda spec, job_dir: first_run):
        worker.run_job(job)
    assert (job_status(job.path)["succeeded"], job_status(job.path)["failed"]) == (2, 2)

    page.goto(f"{studio_server.url}/monitor?job={job.job_id}")  # a shared link to the job
    expect_title(page, "Monitor")
    retry = page.get_by_role("button", name="Retry 2 failed")
    retry.wait_for(timeout=90_000)
    screenshot(page, "retry_1_monitor_two_failed")
    retry.click()
    wait_progress(page, state="completed", at_least=4, timeout=ENGINE_SECONDS)
    expect(page.get_by_text("completed: 4 succeeded, 0 failed", exact=False)).to_be_visible()
    output = [json.loads(x) for x in (job.path / "output.jsonl").read_text().splitlines()]
    assert sorted(line["custom_id"] for line in output) == sorted(prompts)
    tokens = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in output)
    retried = sum(
        line["response"]["body"]["usage"]["completion_tokens"]
        for line in output
        if line["custom_id"] in ("r3", "r4")
    )
    assert job_status(job.path)["completion_tokens"] == tokens
    expect(page.get_by_text(f"{tokens:,} output tokens in", exact=False)).to_be_visible()
    expect(page.get_by_text("over 2 runs", exact=False).first).to_be_visible()
    this_run = page.get_by_text(f"this run's: 2 results, {retried:,} output tokens", exact=False)
    expect(this_run).to_be_visible()
    screenshot(page, "retry_2_monitor_completed")

    page.get_by_role("link", name=re.compile("Open results")).click()
    expect_title(page, "Results")
    expect(page.get_by_text("4 results (rows 1–4 shown)")).to_be_visible()
    expect(metric_value(page, "Succeeded")).to_have_text("4")
    expect(metric_value(page, "Failed")).to_have_text("0")
    expect_no_exception(page)
    screenshot(page, "retry_3_results")


@pytest.mark.browser
@pytest.mark.engine
def test_an_embeddings_batch_from_build_to_results_in_the_browser(
    studio_server: StreamlitServer, chromium_page
) -> None:
    """Issue 30, items 1 and 3, on the real embedding model: Build → Upload & check → Run →
    Monitor → Jobs → Results; every page names the embedding model, never the chat model
    the Run page had chosen, and a vector is no failure."""
    page, home = chromium_page, studio_server.home
    page.goto(studio_server.url)
    expect_title(page, "Upload & check")
    open_page(page, "Build")
    pick_radio(page, "Use the sample table")
    pick_radio(page, "Embeddings")
    choose(page, "Column to embed", "body")
    page.get_by_role("button", name="Save the batch file").click()
    expect(page.get_by_text("Saved tickets.jsonl: 39 of 40 rows written.")).to_be_visible()
    page.get_by_role("button", name="Check it on Upload & check").click()
    expect_title(page, "Upload & check")
    expect(page.get_by_text("All 39 lines are valid.")).to_be_visible()
    page.get_by_role("link", name=re.compile("Continue to Run")).click()
    expect_title(page, "Run")
    expect(page.get_by_text("39 valid of 39 lines")).to_be_visible()
    page.get_by_role("button", name="Start run").click()
    expect_title(page, "Monitor")
    job = current_job(home)
    wait_progress(page, state="completed", at_least=39, timeout=ENGINE_SECONDS)
    done = "completed: 39 succeeded, 0 failed, 39 texts embedded in"  # no "output tokens"
    expect(page.get_by_text(done, exact=False)).to_be_visible()
    screenshot(page, "embeddings_1_monitor_completed")
    spec = json.loads((job / "job.json").read_text(encoding="utf-8"))
    assert spec["endpoints"] == ["/v1/embeddings"]

    open_page(page, "Jobs")
    cells = [cell for row in grid_rows(page.get_by_test_id("stDataFrame").first) for cell in row]
    assert "all-MiniLM-L6-v2" in cells and "SmolLM2-135M-Instruct" not in cells, cells
    screenshot(page, "embeddings_2_jobs")

    open_page(page, "Results")
    expect(page.get_by_text("39 results", exact=False).first).to_be_visible()
    page.get_by_role("tab", name="Similar to this").click()
    page.get_by_test_id("stRadioGroup").get_by_text("A typed text", exact=True).click()
    wait_idle(page)
    expect(page.get_by_text("the job's own model", exact=False)).to_be_visible()
    expect(page.get_by_text("not on this machine", exact=False)).to_have_count(0)
    expect_no_exception(page)
    screenshot(page, "embeddings_3_results_similar")
    typed_text_search_shows_work(page)  # item 11
