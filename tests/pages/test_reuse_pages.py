"""Upload & check says, before a run, which lines take answers already made
(docs/reuse.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import default_model_dir
from core.jobs.folder import create_job
from core.jobs.submit import Submission, planned_spec
from core.reuse.keys import RequestKeys
from core.run import worker
from core.run.engine import resolve_dtype
from core.run.outputs import Choice, Completion, success_line
from core.schemas import EngineConfig
from tests.support.jobs import StandIn, request_line, reused_rerun
from tests.support.pages import open_page, shown


class Echo(StandIn):
    """Answers each request with its prompt (what counts here is its output and keys)."""

    def run(self, requests):
        for r in requests:
            text = r.messages[-1]["content"]
            yield [success_line(r.custom_id, "m", Completion(7, [Choice(text, "stop", 3)]))]


@pytest.mark.usefixtures("default_model")
def test_upload_and_check_says_which_lines_take_answers_already_made(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCH_STUDIO_REUSE", "1")  # Run would reuse: the forecast says so
    batch = studio_home.parent / "greedy.jsonl"
    prompts = {f"q{i}": f"Name a colour ({i})." for i in range(4)}
    batch.write_text("".join(request_line(c, p, temperature=0) + "\n" for c, p in prompts.items()))
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Echo())
    engine = EngineConfig(model=str(default_model_dir()))
    job = create_job(batch, studio_home / "jobs", engine, reuse=True)  # its answers indexed
    assert worker.run_job(job).state == "completed"
    # The same file, one line edited and one repeated.
    edited = dict(prompts, q1="Name a fruit.", again="Name a fruit.")
    batch.write_text("".join(request_line(c, p, temperature=0) + "\n" for c, p in edited.items()))

    spec = planned_spec(Submission(engine=engine))  # as Run opens: its settings
    at = open_page("upload.py")
    at.radio(key="source").set_value("A file on the server").run()
    at.text_input(key="server_path").set_value(str(batch)).run()
    assert not at.exception, [e.message for e in at.exception]
    said = [shown(c.value) for c in at.caption if shown(c.value).startswith("Reuse:")]
    assert said == [
        "Reuse: 3 lines take answers earlier jobs made, saving 21 prompt and 9 output tokens.",
        "Reuse: 1 line repeats a request earlier in the file: run once.",
        f"Reuse: forecast for {RequestKeys(spec).settings()}; other engine settings on Run "
        "change it.",
    ]


def test_results_says_which_answer_was_reused_and_from_where(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = studio_home.parent / "twice.jsonl"
    batch.write_text(request_line("only", "Name a colour.", temperature=0) + "\n")
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Echo())
    engine = EngineConfig(model=str(default_model_dir()))
    first = create_job(batch, studio_home / "jobs", engine, reuse=True)
    worker.run_job(first)
    second = create_job(batch, studio_home / "jobs", engine, reuse=True)
    assert worker.run_job(second).reused == 1

    at = open_page("results.py")
    at.selectbox(key="results_job").set_value(second.job_id).run()
    assert not at.exception, [e.message for e in at.exception]
    assert "Name a colour." in [t.value for t in at.text]  # the answer, given again
    said = [shown(c.value) for c in at.caption if shown(c.value).startswith("Reused:")]
    assert said == [
        f"Reused: this answer was made for only in job {first.job_id} and given again, not "
        "computed (the same request, model and settings)."
    ]


@pytest.mark.parametrize("setting", ["1", "0"])
def test_runs_reuse_checkbox_opens_as_batch_studio_reuse_says(
    setting: str, monkeypatch: pytest.MonkeyPatch, studio_home: Path
) -> None:
    from core.config import SAMPLE_DATA
    from ui.handover import CheckedBatch

    monkeypatch.setenv("BATCH_STUDIO_REUSE", setting)
    batch = SAMPLE_DATA / "review_sentiment.jsonl"
    at = open_page("run.py", checked_batch=CheckedBatch(batch, batch.name))
    assert not at.exception, [e.message for e in at.exception]
    assert at.checkbox(key="run_reuse").value is (setting == "1")


def test_a_rerun_costs_the_same_on_results_and_dashboards_its_reused_answers_saved(
    studio_home: Path,
) -> None:
    """Issue 58, items 6 and 7: one pricing rule. At a GPU-hour price Results said "no
    price" and Dashboards charged the two hours from the reused answers' original times;
    at token prices Results charged the reused answers' tokens."""
    from core.plan.pricing import ModelPrice, PriceTable, save_prices

    prompts = {f"r{i}": f"question {i}" for i in range(4)}
    _, rerun = reused_rerun(studio_home, prompts, {"new": "another"}, seconds=(1800.0, 4.9))
    save_prices(PriceTable(models={"tiny": ModelPrice(gpu_hour=3600.0)}))

    at = open_page("results.py")
    at.selectbox(key="results_job").set_value(rerun.job_id).run()
    assert not at.exception, [e.message for e in at.exception]
    [total] = [shown(c.value) for c in at.caption if c.value.startswith("Cost of the")]
    assert total == "Cost of the 5 results in view: 4.90 USD (+1,800.00 USD saved by reusing 4)"
    each = at.dataframe[0].value.set_index("custom_id")["cost (USD)"]
    assert each.to_dict() == {"new": "4.90", **{c: "reused, saved 450.00" for c in prompts}}

    at = open_page("dashboards.py")
    assert not at.exception, [e.message for e in at.exception]
    (summary,) = [d.value for d in at.dataframe if "requests" in d.value.columns]
    row = summary[summary["job"].str.endswith(rerun.job_id.rsplit("_", 1)[-1])].iloc[0]
    assert (row["cost (USD)"], row["saved by reuse (USD)"]) == ("4.90", "1,800.00")


@pytest.mark.usefixtures("default_model")
def test_run_forecasts_reuse_for_the_settings_chosen_there(
    studio_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dtype chosen on Run changes every key: its forecast says so at once, and names
    the settings it assumed (the run would take nothing the forecast promised otherwise)."""
    monkeypatch.setenv("BATCH_STUDIO_REUSE", "1")
    batch = studio_home.parent / "greedy.jsonl"
    prompts = {f"q{i}": f"Name a colour ({i})." for i in range(3)}
    batch.write_text("".join(request_line(c, p, temperature=0) + "\n" for c, p in prompts.items()))
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Echo())
    engine = EngineConfig(model=str(default_model_dir()))
    job = create_job(batch, studio_home / "jobs", engine, reuse=True)
    assert worker.run_job(job).state == "completed"

    at = open_page("upload.py")
    at.radio(key="source").set_value("A file on the server").run()
    at.text_input(key="server_path").set_value(str(batch)).run()
    at.switch_page("pages/run.py").run()

    def forecast() -> list[str]:
        assert not at.exception, [e.message for e in at.exception]
        return [shown(c.value) for c in at.caption if shown(c.value).startswith("Reuse:")]

    said = forecast()
    assert said[0].startswith("Reuse: 3 lines take answers earlier jobs made")
    # The dtype auto does not resolve to on this CPU (float32 where it has no bf16).
    other = "bfloat16" if resolve_dtype("auto", on_gpu=False) == "float32" else "float32"
    at.selectbox(key="dtype").set_value(other).run()
    said = forecast()
    assert said[0] == "Reuse: no line takes an answer an earlier job made."
    assert said[1].startswith(f"Reuse: forecast for dtype {other}, the model's own length")
