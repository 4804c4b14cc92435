"""Results, Review, Compare and Dashboards pages, driven headless by AppTest (no worker)."""

from __future__ import annotations

import io
import json
import os
import threading
import time

import pandas as pd
import pytest

from core.config import data_paths
from core.store.review import Label, save_label
from tests.support.pages import job_in_home, open_page, shown, values

pytestmark = pytest.mark.usefixtures("studio_home")


def count_caption(at) -> str:
    """The caption that counts the results (the job's owner is captioned above it)."""
    return next(c.value for c in at.caption if " results" in c.value)


def test_results_page_filters_searches_and_shows_details(studio_home):
    job_id = job_in_home(studio_home)
    at = open_page("results.py")
    assert at.selectbox(key="results_job").value == job_id
    table = at.dataframe[0].value
    assert list(table["custom_id"]) == ["a", "b", "c", "d"]
    assert count_caption(at).startswith("4 results")
    at.text_input(key="q").set_value("DROP TABLE results; --").run()
    assert not at.exception
    assert list(at.dataframe[0].value["custom_id"]) == ["b"]
    at.text_input(key="q").set_value("").run()
    at.multiselect(key="f_finish").set_value(["length"]).run()
    assert list(at.dataframe[0].value["custom_id"]) == ["c"]
    # the detail of the only row: answer shown as text, HTML and control character kept
    assert "<b>bold</b>\x07 end" in [t.value for t in at.text]
    assert any("latency 2.50 s" in c.value for c in at.caption)  # the engine's own timing
    assert any('"custom_id": "c"' in c.value for c in at.code)


def test_results_page_counts_a_search_up_to_the_cap_and_all_on_request(studio_home, monkeypatch):
    from core.store import results

    rows = [{"custom_id": f"r{i:02}", "prompt": f"prompt {i}", "answer": "ok"} for i in range(30)]
    job_in_home(studio_home, rows)
    monkeypatch.setattr(results, "SEARCH_COUNT_CAP", 26)
    at = open_page("results.py")
    at.selectbox(key="page_size").set_value(25).run()
    at.text_input(key="q").set_value("prompt").run()  # all 30 match: page 1 is full
    assert count_caption(at).startswith("more than 26 results (rows 1–25 shown)")
    at.button(key="count_all").click().run()
    assert not at.exception
    assert count_caption(at).startswith("30 results (rows 1–25 shown)")
    assert not [b for b in at.button if b.key == "count_all"]
    at.number_input(key="page_no").set_value(2).run()  # the exact count stays while paging
    assert count_caption(at).startswith("30 results (rows 26–30 shown)")
    at.text_input(key="q").set_value("PROMPT").run()  # a new search: its short last page
    assert count_caption(at).startswith("30 results (rows 26–30 shown)")  # ends the count
    at.number_input(key="page_no").set_value(1).run()  # a full page: counted up to the cap
    assert count_caption(at).startswith("more than 26 results (rows 1–25 shown)")
    at.number_input(key="page_no").set_value(2).run()
    at.text_input(key="q").set_value("prompt 2").run()  # 11 matches: page 2 is past the end,
    assert count_caption(at).startswith("11 results (rows 1–11 shown)")  # so back to page 1
    assert len(at.dataframe[0].value) == 11


def test_results_page_sorts_all_results_by_any_column_or_metadata_field(studio_home):
    one = job_in_home(studio_home, name="one")
    other = job_in_home(studio_home, [{"custom_id": "z", "prompt": "p", "answer": "x"}], name="two")
    at = open_page("results.py")
    at.selectbox(key="results_job").set_value(one).run()
    options = at.selectbox(key="sort").options
    assert {"latency_ms", "completion_tokens", "finish_reason", "model", "metadata"} <= set(
        options
    ) and {"metadata.label", "metadata.prompt_version"} <= set(options)
    assert any("orders only the rows of this page" in c.value for c in at.caption)
    at.selectbox(key="sort").set_value("metadata.label").run()
    assert list(at.dataframe[0].value["custom_id"]) == ["b", "c", "a", "d"]
    at.toggle(key="descending").set_value(True).run()
    assert list(at.dataframe[0].value["custom_id"]) == ["a", "b", "c", "d"]
    at.selectbox(key="results_job").set_value(other).run()  # a job without that field
    assert not at.exception
    assert list(at.dataframe[0].value["custom_id"]) == ["z"]


def test_results_page_with_no_match_and_with_a_job_without_results(studio_home):
    job_in_home(studio_home)
    at = open_page("results.py")
    at.text_input(key="q").set_value("nothing like this").run()
    assert at.info[0].value == "No results match these filters."
    assert not at.dataframe


def test_results_page_of_a_job_with_only_failures_offers_the_error_file(studio_home):
    job_in_home(studio_home, [{"custom_id": "x", "prompt": "p", "answer": None}])
    at = open_page("results.py")
    assert list(at.dataframe[0].value["status"]) == ["failed"]
    labels = [b.label for b in at.download_button]
    assert labels == ["Export CSV", "Download output JSONL", "Download error file"]
    at.selectbox(key="page_size").set_value(25).run()  # reruns write no file
    assert not list(studio_home.glob("exports/*"))  # each is written when its button is clicked


def test_results_page_exports_the_filtered_rows(studio_home, monkeypatch):
    from streamlit.runtime.media_file_manager import MediaFileManager

    downloads = {}  # file name -> what a click on its button runs (the browser's fetch)
    register = MediaFileManager.add_deferred

    def recorded(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        downloads[file_name] = data_callable
        return register(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", recorded)
    job_id = job_in_home(studio_home)
    at = open_page("results.py")
    at.multiselect(key="f_status").set_value(["succeeded"]).run()
    at.selectbox(key="export_format").set_value("csv").run()
    assert not at.exception
    assert not list(studio_home.glob("exports/*"))  # written when clicked, not before
    export = next(b for b in at.download_button if b.label == "Export CSV")
    assert not export.proto.disabled
    exported = pd.read_csv(io.BytesIO(downloads[f"{job_id}_results.csv"]()))
    assert sorted(exported["custom_id"]) == ["a", "c", "d"]  # the succeeded ones, not b
    assert set(exported["status"]) == {"succeeded"}


def test_two_sessions_exporting_one_job_each_get_their_own_filter_and_nothing_stays(
    studio_home, monkeypatch
):
    """Session B exports while session A's export is being written: each downloads the rows
    of its own filter, never the other's, and no file is left in exports/."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    from core.store import export as ex

    clicks = []  # (file name, what a click on its button runs), in the order registered
    register = MediaFileManager.add_deferred

    def recorded(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        clicks.append((file_name, data_callable))
        return register(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", recorded)
    job_id = job_in_home(studio_home)

    def session(statuses: list[str]):
        at = open_page("results.py")
        at.multiselect(key="f_status").set_value(statuses).run()
        at.selectbox(key="export_format").set_value("csv").run()
        assert not at.exception
        return [c for name, c in clicks if name == f"{job_id}_results.csv"][-1]

    a_click, b_click = session(["succeeded"]), session(["failed"])
    b_bytes, write = [], ex.export_results

    def a_then_b(*args, **kw):  # B's click lands while A's file is written, before A reads it
        done = write(*args, **kw)
        monkeypatch.setattr(ex, "export_results", write)  # B's own write runs as it is
        b_bytes.append(b_click())
        return done

    monkeypatch.setattr(ex, "export_results", a_then_b)
    a_rows = pd.read_csv(io.BytesIO(a_click()))
    b_rows = pd.read_csv(io.BytesIO(b_bytes[0]))
    assert sorted(a_rows["custom_id"]) == ["a", "c", "d"]
    assert list(b_rows["custom_id"]) == ["b"]
    assert [p for p in (studio_home / "exports").rglob("*")] == []


def test_review_page_draws_a_sample_and_saves_a_label(studio_home):
    job_id = job_in_home(studio_home)
    at = open_page("review.py")
    assert at.info[0].value == "No samples yet: draw one above."
    at.text_input(key="sample_name").set_value("check")
    at.button[0].click().run()  # the form's "Draw sample" sends the name with it
    assert not at.exception
    assert "Sample check drawn: 4 items." in [s.value for s in at.success]
    assert at.info[0].value == "Enter your name above to start labelling."
    at.text_input(key="reviewer").set_value("ana").run()
    assert any("Item 1 of 4" in m.value for m in at.markdown)
    verdicts = [b for b in at.button if b.label in ("Pass", "Fail", "Unsure")]
    assert [b.label for b in verdicts] == ["Pass", "Fail", "Unsure"]  # no verdict pre-chosen
    assert all(b.proto.type != "primary" for b in verdicts)
    scores = [b for b in at.button if b.label in ("1", "2", "3", "4", "5")]
    assert [b.proto.type for b in scores] == ["secondary"] * 5  # no score until one is chosen
    next(b for b in at.button if b.label == "Fail").click().run()
    assert not at.exception
    assert any("Item 2 of 4" in m.value for m in at.markdown)
    at.button(key="prev").click().run()
    assert any(c.value == "You labelled this item: fail." for c in at.caption)
    labelled = next(b for b in at.button if b.label == "Fail")
    assert labelled.proto.type == "primary"  # the saved verdict is the one marked
    at.switch_page("pages/results.py").run()
    at.switch_page("pages/review.py").run()
    assert at.text_input(key="reviewer").value == "ana"  # the name kept across pages
    assert job_id


def test_review_and_compare_show_the_whole_conversation_of_each_side(studio_home):
    system = "You label reviews as positive or negative."
    for name, prompt in (("a", "Prompt A: classify"), ("b", "Prompt B: classify")):
        row = {"custom_id": "q", "system": f"{system} {name}", "prompt": prompt, "answer": "pos"}
        job_in_home(studio_home, [row], name=name)
    at = open_page("compare.py")
    texts = [t.value for t in at.text]
    assert f"{system} a" in texts and f"{system} b" in texts  # the system prompts, per side
    assert "Prompt A: classify" in texts and "Prompt B: classify" in texts  # B's own prompt
    at.switch_page("pages/review.py").run()
    at.text_input(key="sample_name").set_value("look")
    at.button[0].click().run()
    at.text_input(key="reviewer").set_value("ana").run()
    shown_texts = [t.value for t in at.text]
    assert any(s.startswith(system) for s in shown_texts)  # the task's instructions, shown


def test_compare_page_two_jobs_side_by_side_with_a_diff(studio_home):
    job_in_home(
        studio_home, [{"custom_id": "q", "prompt": "sky?", "answer": "It is blue."}], name="a"
    )
    job_in_home(
        studio_home, [{"custom_id": "q", "prompt": "sky?", "answer": "It is very blue."}], name="b"
    )
    at = open_page("compare.py")
    assert not at.exception
    captions = [c.value for c in at.caption]
    assert "The same models, prompt versions, request parameters and settings." in captions
    assert any("1 pair up on custom_id" in c for c in captions)
    [diff] = [h.proto.body for h in at.get("html")]
    assert "very " in diff and "#055d20" in diff  # the added word, coloured


def test_compare_downloads_its_preferences_as_openai_preference_lines(studio_home, monkeypatch):
    """Issue 44 item 4: the pairs a reviewer preferred come back as OpenAI preference
    (DPO) fine-tuning lines; a tie is left out, and the page says so."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    sent: dict[str, bytes] = {}
    original = MediaFileManager.add

    def record(self, data, mimetype, coordinates, file_name=None, **kw):
        sent[file_name] = data
        return original(self, data, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add", record)
    for name, answers in (("a", ("Blue.", "Wet.")), ("b", ("It is <i>blue</i>.", "Damp."))):
        rows = [
            {"custom_id": cid, "prompt": f"{cid}?", "answer": answer}
            for cid, answer in zip(("sky", "sea"), answers, strict=True)
        ]
        job_in_home(studio_home, rows, name=name)
    at = open_page("compare.py")
    assert not [b for b in at.button if b.label.startswith("Prepare preference file")]
    at.text_input(key="reviewer").set_value("ana").run()
    next(b for b in at.button if b.label == "Tie").click().run()  # the first pair, by key: sea
    next(b for b in at.button if b.label == "B is better").click().run()  # sky
    next(b for b in at.button if b.label.startswith("Prepare preference file")).click().run()
    assert not at.exception
    shown = " ".join(i.value for i in at.info).replace("\\", "").replace("\u2060", "")
    assert "1 pair; left out: 1 a tie" in shown, shown
    (name,) = [n for n in sent if n and n.endswith(".dpo.jsonl")]
    assert [b.label for b in at.download_button if b.label.startswith("Download cmp_")] == [
        f"Download {name} (1 pair)"
    ]
    (line,) = [json.loads(x) for x in sent[name].decode().splitlines()]
    assert line == {
        "input": {"messages": [{"role": "user", "content": "sky?"}]},
        "preferred_output": [{"role": "assistant", "content": "It is <i>blue</i>."}],
        "non_preferred_output": [{"role": "assistant", "content": "Blue."}],
    }


def charts(at) -> dict[str, dict]:
    """The page's plotly charts, by title: each as its figure's JSON."""
    figures = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return {f["layout"]["title"]["text"]: f for f in figures}


def test_dashboards_page_draws_every_chart(studio_home):
    job_in_home(studio_home)
    at = open_page("dashboards.py")
    assert not at.exception
    (summary,) = [d.value for d in at.dataframe if "requests" in d.value.columns]
    assert int(summary["requests"].iloc[0]) == 4 and int(summary["failed"].iloc[0]) == 1
    # Cost as money reads, second from the left, where a wide table cannot hide it.
    # No price for the model: "no price", never 0.00 nor "unknown".
    assert list(summary.columns)[1] == "cost (USD)" and summary.iloc[0, 1] == "no price"
    drawn = charts(at)
    offered = at.selectbox(key="dash_html").options  # one HTML download per chart
    assert len(drawn) == len(offered) == 10
    assert all(f["data"] or f["layout"].get("annotations") for f in drawn.values())
    counted = {t["name"]: values(t["y"]) for t in drawn["Requests"]["data"]}
    assert counted == {"succeeded": [3], "failed": [1]}  # every request, by outcome
    assert [b.label for b in at.download_button] == ["Download HTML"]


def test_dashboards_slower_than_the_wait_say_computing_then_draw_when_done(
    studio_home, monkeypatch
):
    job_in_home(studio_home)
    from core.store import dashboards

    monkeypatch.setenv("BATCH_STUDIO_PAGE_WAIT", "0")
    release, summary = threading.Event(), dashboards.summary

    def slow_summary(*args, **kw):  # figures over a million results
        release.wait(30)
        return summary(*args, **kw)

    monkeypatch.setattr(dashboards, "summary", slow_summary)
    at = open_page("dashboards.py")
    assert any("Computing the summary and the charts" in c.value for c in at.caption)
    assert not charts(at)  # nothing half-made or stale is shown
    assert not [d for d in at.dataframe if "requests" in d.value.columns]
    release.set()
    for _ in range(300):  # the page's fragment reruns it once they are there
        at.run()
        if charts(at):
            break
        time.sleep(0.1)
    assert not at.exception
    (table,) = [d.value for d in at.dataframe if "requests" in d.value.columns]
    assert int(table["requests"].iloc[0]) == 4 and int(table["failed"].iloc[0]) == 1
    assert not any("Computing the summary" in c.value for c in at.caption)


def test_pages_without_jobs_say_what_to_do():
    for page in ("review.py", "compare.py", "dashboards.py"):
        at = open_page(page)
        assert at.info, page


def test_review_labels_from_the_store_show_in_dashboards(studio_home):
    job_id = job_in_home(studio_home)
    at = open_page("dashboards.py")  # the app's store is the only one that opens the file
    from ui.store import store

    assert not charts(at)["Review pass rate"]["data"]  # no label yet: an empty chart
    save_label(store(), job_id, "a", "ana", Label("pass"))
    save_label(store(), job_id, "b", "ben", Label("fail"))
    at.run()
    assert not at.exception
    [bars] = charts(at)["Review pass rate (95% CI)"]["data"]
    assert values(bars["y"]) == [0.5]  # one pass, one fail


def test_results_page_shows_a_batch_owner_and_metadata_and_filters_jobs_by_them(studio_home):
    plain = job_in_home(studio_home, name="plain")
    batch = job_in_home(studio_home, name="batch")
    spec_file = data_paths().jobs / batch / "job.json"
    spec = json.loads(spec_file.read_text())
    spec["provenance"]["owner"] = "alice"
    spec["metadata"] = {"team": "support", "run": "7"}
    spec_file.write_text(json.dumps(spec))
    at = open_page("results.py")
    at.selectbox(key="results_job").set_value(batch).run()
    assert "owner alice · team=support, run=7" in [c.value.replace("\\", "") for c in at.caption]
    at.selectbox(key="results_job").set_value(plain).run()
    assert not any("owner alice" in c.value.replace("\\", "") for c in at.caption)
    assert set(at.selectbox(key="results_job").options) == {plain, batch}
    at.multiselect(key="results_metadata").set_value(["team=support"]).run()
    assert not at.exception
    assert at.selectbox(key="results_job").options == [batch]
    assert at.selectbox(key="results_job").value == batch


def test_results_show_each_requests_cost_and_the_total_in_view(studio_home):
    """Issue 30, item 13: what Langfuse users look for first."""
    from core.plan.pricing import ModelPrice, PriceTable, save_prices

    rows = [
        {"custom_id": "a", "answer": "yes", "prompt_tokens": 1000, "tokens": 500},
        {"custom_id": "b", "answer": "no", "prompt_tokens": 2000, "tokens": 100},
        {"custom_id": "c", "answer": None},
    ]
    job_in_home(studio_home, rows)
    save_prices(PriceTable(models={"tiny": ModelPrice(input_per_1m=0.15, output_per_1m=0.6)}))
    at = open_page("results.py")
    table = at.dataframe[0].value.set_index("custom_id")
    # a: 1000 x 0.15 + 500 x 0.60 = 450 per 1M tokens; b: 300 + 60 = 360.
    assert table.loc["a", "cost (USD)"] == "0.00045"
    assert table.loc["b", "cost (USD)"] == "0.00036"
    assert "Cost of the 3 results in view: 0.00081 USD" in [shown(c.value) for c in at.caption]


def test_dashboards_writes_no_price_table_when_no_price_was_edited(studio_home):
    job_in_home(studio_home)
    at = open_page("dashboards.py")
    at.run()
    assert not at.exception
    # The table shown (a row per model, no price) is the saved one: nothing to write. It
    # was written (with an fsync) on every rerun of every session.
    assert not (studio_home / "prices.json").exists()


def test_results_of_a_model_without_a_price_say_no_price_never_zero(studio_home):
    """Issue 38, item 14: with prices for other models only, the total read 0.00 USD."""
    from core.plan.pricing import ModelPrice, PriceTable, save_prices

    job_in_home(studio_home)
    save_prices(PriceTable(models={"other": ModelPrice(input_per_1m=1.0, output_per_1m=1.0)}))
    at = open_page("results.py")
    table = at.dataframe[0].value
    assert set(table["cost (USD)"]) == {"no price"}
    [total] = [shown(c.value) for c in at.caption if c.value.startswith("Cost of the")]
    assert total == "Cost of the 4 results in view: no price; no price for tiny"


def test_a_cancelled_job_without_results_says_none_will_come(tmp_path):
    """Issue 38, item 14: a cancelled batch with no results said they "appear here as the
    worker writes them"."""
    from core.jobs.folder import create_job
    from core.schemas import EngineConfig, JobStatus
    from tests.support.jobs import request_line

    batch = tmp_path / "b.jsonl"
    batch.write_text(request_line("a", "hi") + "\n" + request_line("b", "ho") + "\n")
    job = create_job(batch, data_paths().jobs, EngineConfig(model="/models/tiny"))
    status = JobStatus(total=2, finished_at="2026-12-03T10:00:00+00:00")
    status.enter("cancelled", "cancelled: 0 of 2 requests have a result (0 succeeded)")
    job.write_status(status)
    at = open_page("results.py")
    [info] = [i.value for i in at.info]
    assert "cancelled before any request had a result" in info
    assert "as the worker writes them" not in info
    status.enter("running")
    status.pid, status.heartbeat_at = os.getpid(), time.time()
    job.write_status(status)
    at = open_page("results.py")
    assert "They appear here as the worker writes them." in at.info[0].value


def test_the_price_tables_label_is_text_not_markdown(studio_home):
    """Issue 38, item 14: the model named * rendered as a bullet in the expander's label."""
    from tests.support.pages import shown

    job_in_home(studio_home)
    at = open_page("dashboards.py")
    [label] = [e.label for e in at.expander if "Price table" in e.label]
    # Every markdown character escaped: the label reads as typed.
    assert label == r"Price table \(USD; the model named \* prices the models not listed\)"
    assert shown(label) == "Price table (USD; the model named * prices the models not listed)"


def test_dashboards_price_table_says_the_rule_it_prices_by(studio_home):
    """Issue 58's closing walk: under the price table Dashboards said GPU hours were
    "estimated from the first to the last answer time", the rule item 6 replaced by each
    job's running time (core/plan/pricing.py's usage_cost)."""
    job_in_home(studio_home)
    at = open_page("dashboards.py")
    assert not at.exception, [e.message for e in at.exception]
    [said] = [c.value for c in at.caption if c.value.startswith("Per million")]
    assert "first to the last answer" not in said
    assert "running time over all its runs" in said and "priced as saved" in said
