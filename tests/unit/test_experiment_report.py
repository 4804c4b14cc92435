"""The Experiments page's figures (core/experiments/report.py): the summary row per variant
equals a recount from the job's output files, the views pick the items they name, and a
variant against the baseline is said in words with its test's p-value."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from core.config import data_paths
from core.experiments import report
from core.experiments.runs import (
    experiments_version,
    export,
    files_version,
    grade,
    grades_stale,
    read_grades,
    read_state,
)
from core.files import write_atomic
from core.jobs.folder import JobFolder
from core.plan.pricing import ModelPrice, PriceTable
from core.store import compare as cmp
from core.store import review as rv
from core.store import training
from core.store.db import Store
from tests.support.experiments import experiment_in_home, promptfoo_config

pytestmark = pytest.mark.usefixtures("studio_home")

CHECKS = "    - {type: icontains, value: paris}\n    - {type: not-icontains, value: sorry}\n"
N = 40


def answers(cid: str) -> dict:
    """Prompt 0 ("plain") answers Paris on 10 of 40 items, prompt 1 ("terse") on 36;
    item 5 of prompt 1 fails; "sorry" on every seventh item of prompt 0."""
    t, p = int(cid.split(".")[0][1:]), int(cid.split(".")[1][1:])
    if p == 1 and t == 5:
        return {"answer": None, "error": ("engine_rejected", "prompt too long")}
    paris = t < 10 if p == 0 else t % 10 != 9
    text = ("Paris" if paris else "Lyon") + (" sorry" if p == 0 and t % 7 == 0 else "")
    return {"answer": text, "tokens": 3 + t % 4 + p, "prompt_tokens": 20 + p,
            "latency_ms": 100 + 10 * t + p}  # fmt: skip


@pytest.fixture
def experiment(model) -> str:
    tests = [{"description": f"item {t}", "country": "France"} for t in range(N)]
    return experiment_in_home(model, promptfoo_config(tests, ["plain", "terse"], CHECKS), answers)


def recount(experiment_id: str) -> dict[int, dict]:
    """Per prompt, what the job's own files say, counted without the product's code."""
    job = JobFolder(data_paths().jobs / read_state(experiment_id).job_id)
    keys = ("ok", "failed", "paris", "sorry_free", "all", "prompt", "completion")
    out: dict[int, dict] = {p: {**dict.fromkeys(keys, 0), "latency": []} for p in (0, 1)}
    for raw in job.output.read_text().splitlines():
        line = json.loads(raw)
        mine = out[int(line["custom_id"].split(".")[1][1:])]
        body = line["response"]["body"]
        text = body["choices"][0]["message"]["content"].lower()
        mine["ok"] += 1
        mine["paris"] += "paris" in text
        mine["sorry_free"] += "sorry" not in text
        mine["all"] += "paris" in text and "sorry" not in text
        mine["prompt"] += body["usage"]["prompt_tokens"]
        mine["completion"] += body["usage"]["completion_tokens"]
        mine["latency"].append(line["latency_ms"])
    for raw in job.errors.read_text().splitlines():
        out[int(json.loads(raw)["custom_id"].split(".")[1][1:])]["failed"] += 1
    return out


def test_the_summary_equals_a_recount_from_the_output_files(experiment):
    prices = PriceTable(models={"*": ModelPrice(input_per_1m=1.0, output_per_1m=2.0)})
    rows = report.summary(report.load(experiment), prices)
    assert [r.variant for r in rows] == ["plain", "terse"]
    for p, row in enumerate(rows):
        want = recount(experiment)[p]
        assert (row.items, row.answered, row.failed) == (N, want["ok"], want["failed"])
        assert (row.every_check.passed, row.every_check.graded) == (want["all"], want["ok"])
        assert row.checks["icontains: paris"].passed == want["paris"]
        assert row.checks["not-icontains: sorry"].passed == want["sorry_free"]
        assert (row.prompt_tokens, row.completion_tokens) == (want["prompt"], want["completion"])
        cost = (want["prompt"] * 1.0 + want["completion"] * 2.0) / 1e6
        assert row.cost_per_1000 == pytest.approx(cost / want["ok"] * 1000)
        assert row.latency_p50_ms == pytest.approx(pd.Series(want["latency"]).quantile(0.5))
        assert row.latency_p95_ms == pytest.approx(pd.Series(want["latency"]).quantile(0.95))
        low, high = row.every_check.low, row.every_check.high
        assert low < want["all"] / want["ok"] < high
    assert rows[1].failed == 1 and rows[0].failed == 0


def test_no_price_is_said_as_none_not_as_zero(experiment):
    rows = report.summary(report.load(experiment), PriceTable())
    assert rows[0].cost_per_1000 is None
    assert report.summary_table(rows)["cost per 1,000 items"].tolist() == ["no price"] * 2


def test_against_the_baseline_the_difference_is_said_with_mcnemars_p(experiment):
    exp = report.load(experiment)
    verdicts = {v.measure: v for v in report.against(exp, baseline=0)}
    paris = verdicts["icontains: paris"]
    # 39 items both answered (item 5 failed for terse): plain passes 9, terse 35
    assert (paris.items, paris.significant) == (39, True)
    assert paris.text.startswith(
        "terse passes 'icontains: paris' 66.7 points more often than plain (p < 0.001"
    )
    sorry = verdicts["not-icontains: sorry"]  # 6 items differ, all one way: 2 / 2**6
    assert sorry.p == pytest.approx(0.03125)
    assert sorry.text == (
        "terse passes 'not-icontains: sorry' 15.4 points more often than plain (p = 0.031)"
    )
    assert verdicts["mean score"].significant
    back = {v.measure: v for v in report.against(exp, baseline=1)}
    assert "less often than terse" in back["icontains: paris"].text


def test_identical_variants_show_no_significant_difference(model):
    tests = [{"description": f"item {t}", "country": "France"} for t in range(30)]
    config = promptfoo_config(tests, ["one", "two"], CHECKS)

    def answer(cid: str) -> dict:  # the same answer from both prompts
        return {"answer": "Paris" if int(cid[1:].split(".")[0]) % 3 else "Lyon"}

    same = experiment_in_home(model, config, answer)
    texts = [v.text for v in report.against(report.load(same), baseline=0)]
    assert texts == [
        "two against one on every check: no significant difference on 30 items",
        "two against one on 'icontains: paris': no significant difference on 30 items",
        "two against one on 'not-icontains: sorry': no significant difference on 30 items",
        "two against one on mean score: no significant difference on 30 items",
    ]


def test_the_views_pick_failures_disagreements_and_a_checks_failures(experiment):
    exp = report.load(experiment)
    checks = ["Fails icontains: paris", "Fails not-icontains: sorry"]
    assert report.views(exp) == ["All", "Failures", "Different", *checks]
    assert report.view_items(exp, "All") == list(range(N))
    # plain fails from item 10 on, and on every seventh; terse fails 9, 19, 29, 39 and 5
    assert report.view_items(exp, "Failures") == [0, 5, 7, 9, *range(10, N)]
    different = report.view_items(exp, "Different")
    assert different == [0, 5, 7, 9] + [t for t in range(10, N) if t % 10 != 9]
    assert report.view_items(exp, "Fails not-icontains: sorry") == [0, 7, 14, 21, 28, 35]


def test_the_matrix_is_a_row_per_item_and_a_plain_text_cell_per_variant(experiment):
    exp = report.load(experiment)
    wide = report.wide(exp, [0, 5])
    assert list(wide.columns) == ["item", "country", "plain", "terse"]
    assert wide["item"].tolist() == ["item 0", "item 5"]
    assert (
        wide.loc[0, "plain"]
        == "Paris sorry\n✓ icontains: paris  ✗ not-icontains: sorry\n3 tokens · 100 ms"
    )
    assert (
        wide.loc[1, "terse"]
        == "(request failed: prompt too long)\n– icontains: paris  – not-icontains: sorry"
    )


@pytest.mark.parametrize("fmt", ["parquet", "xlsx", "csv"])
def test_the_matrix_exports_with_formula_safe_cells(model, tmp_path, fmt):
    tests = [{"description": "one", "country": "France"}]
    hostile = experiment_in_home(
        model, promptfoo_config(tests, ["a"], CHECKS), lambda cid: {"answer": "=HYPERLINK(1)"}
    )
    path = tmp_path / f"m.{fmt}"
    assert export(hostile, path, fmt=fmt) == 1
    read = {"parquet": pd.read_parquet, "xlsx": pd.read_excel, "csv": pd.read_csv}[fmt](path)
    spreadsheet = fmt != "parquet"  # Parquet keeps the data as it is: no spreadsheet runs it
    assert read.loc[0, "output"] == ("'=HYPERLINK(1)" if spreadsheet else "=HYPERLINK(1)")
    assert list(read.columns)[:5] == ["test", "prompt", "provider", "country", "output"]


def test_a_damaged_grades_file_is_graded_again_not_a_traceback(experiment):
    state = read_state(experiment)
    grades = data_paths().home / "experiments" / experiment / "grades.json"
    grades.write_text("{not json", encoding="utf-8")
    assert grades_stale(state, None)
    assert report.load(experiment).frame["pass"].isna().all()  # shown as not graded yet
    grade(state)
    assert not grades_stale(state, None)
    assert report.summary(report.load(experiment), PriceTable())[0].every_check.graded == N


def test_the_same_file_run_again_shows_a_trend_per_variant(experiment, model):
    tests = [{"description": f"item {t}", "country": "France"} for t in range(N)]
    config = promptfoo_config(tests, ["plain", "terse"], CHECKS)
    assert report.trend(experiment).empty  # one run: no trend
    later = experiment_in_home(model, config, lambda cid: {"answer": "Paris"})
    runs = report.trend(later)
    assert runs["run"].tolist() == [experiment, later]  # the oldest first
    assert runs["plain"].tolist() == [20.0, 100.0]  # 8 of 40 passed both checks, then all
    assert runs["terse"].tolist() == [round(35 / 39 * 100, 1), 100.0]


def test_the_files_version_moves_on_with_answers_written_and_grades_saved(experiment, model):
    """The page keeps what it drew while this key stays: every change it must show moves
    it (a grade saved, an answer appended), and a rerun that changed nothing keeps it."""
    state = read_state(experiment)
    before = files_version(state)
    assert files_version(state) == before  # nothing changed: the kept matrix stands
    grades = read_grades(experiment)
    grades.outcomes["t0.p0.m0"] = [False, False]
    folder = data_paths().home / "experiments" / experiment
    write_atomic(folder / "grades.json", grades.model_dump_json())  # as grade() saves them
    graded = files_version(state)
    assert graded != before
    job = JobFolder(data_paths().jobs / state.job_id)
    with job.output.open("a", encoding="utf-8") as out:  # a resumed job's answer
        out.write(job.output.read_text().splitlines()[0] + "\n")
    assert files_version(state) != graded
    listed = experiments_version()
    tests = [{"description": "one", "country": "France"}]
    experiment_in_home(model, promptfoo_config(tests, ["a"], CHECKS), answers)
    assert experiments_version() != listed  # a new experiment is listed


def test_a_preference_between_two_cells_is_compares_and_feeds_its_dpo_export(experiment, tmp_path):
    """Preferring terse's answer to plain's on item 12 writes Compare's preference record
    (the one writer, core/store/compare.py), counts in Compare's tally and exports as a
    DPO pair, both variants having sent the same conversation."""
    exp = report.load(experiment)
    db = Store(data_paths().home / "studio.duckdb")
    db.ingest(JobFolder(data_paths().jobs / exp.job_id))
    with pytest.raises(cmp.CompareError, match="enter your reviewer name first"):
        report.prefer(db, exp, 12, 0, 1, " ", "B")
    with pytest.raises(cmp.CompareError, match="two different variants"):
        report.prefer(db, exp, 12, 1, 1, "ana", "B")
    comparison = report.prefer(db, exp, 12, 0, 1, "ana", "B")
    saved = [
        json.loads(x)
        for f in data_paths().human.rglob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    kept = [(x["kind"], x["job_a"], x["custom_id_a"], x["custom_id_b"], x["choice"]) for x in saved]
    assert kept == [("preference", exp.job_id, "t12.p0.m0", "t12.p1.m0", "B")]
    assert report.preferred(db, exp, 12, 0, 1, "ana") == ("B", {"A": 0, "B": 1, "tie": 0})
    assert cmp.preference_tally(db, comparison) == {"A": 0, "B": 1, "tie": 0}
    outcome = training.export_dpo(db, tmp_path / "dpo.jsonl", comparison)
    line = json.loads((tmp_path / "dpo.jsonl").read_text())
    assert outcome.written == 1
    assert line["preferred_output"][0]["content"] == "Paris"  # terse on item 12
    assert line["non_preferred_output"][0]["content"] == "Lyon"
    assert line["input"]["messages"] == [{"role": "user", "content": "Capital of France?"}]
    db.close()


def test_an_item_shows_its_conversation_beside_every_variants_answer(experiment):
    exp = report.load(experiment)
    job = JobFolder(data_paths().jobs / exp.job_id)
    damaged = '{"t5.p0.m0": 1\n["t5.p0.m0"]\n{"custom_id": "t5.p0.m0", "body": "t5.p0.m0"}\n'
    job.input.write_text(damaged + job.input.read_text())  # lines naming it, unreadable
    db = Store(data_paths().home / "studio.duckdb")
    rv.save_label(db, exp.job_id, "t5.p0.m0", "bob", rv.Label("unsure"))
    rv.save_label(db, exp.job_id, "t5.p0.m0", "ana", rv.Label("pass"))
    rv.save_label(db, exp.job_id, "t6.p1.m0", "ana", rv.Label("fail"))  # another item's
    turns = report.item_turns(exp, 5, store=db)
    db.close()
    assert turns[0].labels == [["ana: pass", "bob: unsure"], []]
    assert len(turns) == 1  # both prompts sent the same conversation
    assert turns[0].conversation == [("user", "Capital of France?")]
    assert turns[0].answers == [
        ("plain", "Paris\n✓ icontains: paris  ✓ not-icontains: sorry\n4 tokens · 150 ms"),
        ("terse", "(request failed: prompt too long)\n– icontains: paris  – not-icontains: sorry"),
    ]
