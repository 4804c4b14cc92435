"""A model as judge (issue 17): the judge batch, its verdicts joined back as a check, bad
templates, the pairwise judge's order swap, and agreement between people and a check.

The judge jobs here are answered by the real worker with a scripted executor in place of
the engine (tests/engine/test_judge_engine.py runs one on the built-in model)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from core.config import data_paths
from core.experiments.runs import custom_id
from core.human import owners
from core.jobs.folder import JobFolder
from core.qa import judge as J
from core.qa import pairwise as P
from core.qa.grading import grade_jobs
from core.qa.rules import load_rules
from core.store import checks, judged, trust
from core.store import export as ex
from core.store import results as R
from core.store.compare import ITEM, VARIANT, Side, pairwise_judges
from core.store.review import Label, save_label
from core.store.samples import sample_items
from tests.support.cli import cli
from tests.support.judge import ROWS, answer_judge, input_lines, open_store, verdict
from tests.support.pages import job_in_home

pytestmark = pytest.mark.usefixtures("studio_home", "calibrated_judges")


def test_a_judge_job_grades_each_answer_with_the_verdict_schema(studio_home, model, no_worker):
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    template = (
        "Task: {{ prompt }}\nSystem: {{ system }}\nAnswer: {{ answer }}\n"
        "{{ metadata.topic | default('-') }}"
    )
    started = J.start_judge(db, graded, template, J.JudgeSettings(str(model), max_tokens=40))
    job = started.job
    assert no_worker == [job]  # submitted like any job: its worker is started
    spec = job.read_spec()
    assert spec.judge.kind == "verdict" and spec.judge.graded == [graded]
    assert spec.judge.check.startswith("judge_")
    assert spec.name.startswith("judge of ")
    lines = input_lines(job)
    assert [line["custom_id"] for line in lines] == ["a", "b", "d"]  # c failed: not judged
    body = lines[0]["body"]
    assert body["temperature"] == 0 and body["max_tokens"] == 40
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": J.VERDICT_SCHEMA, "strict": True},
    }
    assert body["metadata"] == {"judge_of": graded, "custom_id": "a"}
    user = body["messages"][-1]["content"]
    assert user == "Task: prompt a\nSystem: Be kind.\nAnswer: Your refund is on its way.\n-"
    assert lines[1]["body"]["messages"][-1]["content"].endswith("\nrefund")
    assert J.saved_template(job) == template


def test_verdicts_join_back_as_a_check_with_pass_rates_filter_and_exports(
    studio_home, model, no_worker, tmp_path
):
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    grade_jobs(db, [graded], load_rules("rules:\n  - name: short\n    type: length\n    max: 3\n"))
    job = J.start_judge(db, graded, J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model))).job
    answer_judge(job, {"a": verdict("pass", 5, "kind"), "b": verdict("fail", 1), "d": "oops {"})
    db.ingest_all(data_paths().jobs)
    name = job.read_spec().judge.check
    assert checks.rule_names(db, [graded]) == ["short", name]  # judges after the rules
    rates = checks.pass_rates(db, [graded], "all").set_index("rule")
    assert rates.loc[name, ["passed", "failed", "not_graded"]].tolist() == [1, 1, 1]
    assert rates.loc[name, "pass_rate"] == pytest.approx(0.5)
    assert rates.loc["short", ["passed", "failed"]].tolist() == [1, 2]  # rules unchanged
    got = judged.verdicts(db, [graded], name).set_index("custom_id")
    assert got.loc["a", "score"] == 5 and got.loc["a", "reason"] == "kind"
    assert pd.isna(got.loc["d", "passed"])  # did not parse: not graded, counted apart
    failing = R.page(db, R.ResultFilter(job_ids=[graded], checks={name: "failed"}))
    assert list(failing["custom_id"]) == ["b"]
    unread = R.page(db, R.ResultFilter(job_ids=[graded], checks={name: "not_graded"}))
    assert list(unread["custom_id"]) == ["d"]

    csv = tmp_path / "out.csv"
    ex.export_results(db, R.ResultFilter(job_ids=[graded]), csv, "csv")
    frame = pd.read_csv(csv).set_index("custom_id")
    assert frame.loc["a", f"check_{name}"] == True  # noqa: E712
    assert frame.loc["b", f"{name}_reason"] == "because"
    assert pd.isna(frame.loc["c", f"check_{name}"]) and frame.loc["b", "check_short"] == True  # noqa: E712
    jsonl = tmp_path / "out.jsonl"
    ex.export_results(db, R.ResultFilter(job_ids=[graded]), jsonl, "jsonl")
    first = json.loads(jsonl.read_text().splitlines()[0])
    assert first["checks"] == {"short": False, name: True}
    save_label(db, graded, "b", "ana", Label("pass"))
    labels = tmp_path / "labels.parquet"
    ex.export_labels(db, labels, "parquet")
    row = pd.read_parquet(labels).iloc[0]
    assert row["verdict"] == "pass" and row[f"check_{name}"] == False  # noqa: E712
    db.close()


def test_which_results_a_rules_failures_or_a_sample(studio_home, model, no_worker):
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    grade_jobs(db, [graded], load_rules("rules:\n  - name: short\n    type: length\n    max: 3\n"))
    settings = J.JudgeSettings(str(model))
    job = J.start_judge(db, graded, "{{ answer }}", settings, J.Choice("failures", "short")).job
    assert [line["custom_id"] for line in input_lines(job)] == ["a", "d"]
    from core.store.samples import SampleDefinition, create_sample

    sample = create_sample(
        db, "two", SampleDefinition(filter=R.ResultFilter(job_ids=[graded]), size=2, seed=1)
    )
    expected = sorted(set(sample_items(db, sample.sample_id)["custom_id"]) - {"c"})
    job = J.start_judge(
        db, graded, "{{ answer }}", settings, J.Choice("sample", None, sample.sample_id)
    ).job
    assert sorted(line["custom_id"] for line in input_lines(job)) == expected
    with pytest.raises(J.JudgeError, match="choose the rule"):
        J.start_judge(db, graded, "{{ answer }}", settings, J.Choice("failures"))


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Task: {{ prompt }}\n{% if answer %}\n{{ answer }\n", "template line 3: unexpected '}'"),
        ("Task: {{ prompt }}\nAnswer: {{ answr }}\n", "template line 2: 'answr' is undefined"),
        (
            "{{ prompt }}\n{{ metadata.topic.upper() }}",
            "template line 2: 'dict object' has no attribute 'topic'",
        ),
        ("{% for i in range(100000) %}x{% endfor %}", "range of 100,000 items"),
        ("{{ answer.__class__.__mro__ }}", "template line 1"),
        ("   \n", "the judge template is empty"),
    ],
)
def test_a_bad_template_is_refused_naming_its_line(
    studio_home, model, no_worker, template, message
):
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    with pytest.raises(J.JudgeError) as caught:
        J.start_judge(db, graded, template, J.JudgeSettings(str(model)))
    assert message in str(caught.value)
    assert no_worker == []  # nothing was created


def test_results_are_read_a_page_at_a_time_and_a_late_failure_creates_nothing(
    studio_home, model, no_worker, monkeypatch
):
    monkeypatch.setattr(J, "PAGE_ROWS", 2)  # a, b | d: two pages
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    started = J.start_judge(db, graded, "{{ answer }}", J.JudgeSettings(str(model)))
    lines = input_lines(started.job)
    assert [line["custom_id"] for line in lines] == ["a", "b", "d"]
    assert lines[2]["body"]["messages"][-1]["content"] == "We will call you tomorrow."
    # a and d have no topic; d fails on the second page, after b was written.
    jobs_before = sorted(p.name for p in data_paths().jobs.iterdir())
    template = "{{ metadata.topic.upper() if metadata.topic else metadata.missing.upper() }}"
    with pytest.raises(J.JudgeError) as caught:
        J.start_judge(db, graded, template, J.JudgeSettings(str(model)))
    assert "the template fails on 2 result(s)" in str(caught.value)
    assert "result 'a'" in str(caught.value) and "result 'd'" in str(caught.value)
    assert sorted(p.name for p in data_paths().jobs.iterdir()) == jobs_before
    assert no_worker == [started.job]  # the first judge only


def test_core_judge_refuses_a_bad_template_and_a_missing_job_without_a_traceback(
    studio_home, tmp_path
):
    graded = job_in_home(studio_home, ROWS)
    bad = tmp_path / "judge.j2"
    bad.write_text("Answer:\n{{ answer }\n", encoding="utf-8")
    done = cli("judge", graded, "--template", str(bad))
    assert done.returncode == 1, done.stderr
    assert f"error: {bad}: template line 2: unexpected '}}'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    bad.write_text("{{ answer }}", encoding="utf-8")
    missing = cli("judge", "job_nope", "--template", str(bad))
    assert missing.returncode == 2 and "no job job_nope" in missing.stderr
    no_file = cli("judge", graded, "--template", str(tmp_path / "none.j2"))
    assert no_file.returncode == 2 and "does not exist" in no_file.stderr
    no_rule = cli("judge", graded, "--template", str(bad), "--failures-of", "nope")
    assert no_rule.returncode == 2 and "no answers to judge" in no_rule.stderr


# -- pairwise ---------------------------------------------------------------------------------


def test_exactly_half_of_the_pairs_are_swapped_and_always_the_same_half():
    keys = [f"item-{n}" for n in range(10)]
    swapped = P.swapped_keys(keys)
    assert len(swapped) == 5 and swapped <= set(keys)
    assert P.swapped_keys(reversed(keys)) == swapped  # the order given changes nothing
    assert len(P.swapped_keys(keys[:7])) == 3  # odd: rounded down
    assert P.swapped_keys([]) == set()
    assert 40 <= sum(len(P.swapped_keys([f"{k}-{n}" for k in "ab"])) for n in range(100)) <= 100


def test_a_pairwise_judge_shows_swapped_sides_and_maps_verdicts_back(
    studio_home, model, no_worker, monkeypatch
):
    monkeypatch.setattr(P, "PAGE_ROWS", 2)  # pairs read two at a time: three pages
    ids = [f"q{n}" for n in range(6)]
    job_a = job_in_home(studio_home, [{"custom_id": i, "answer": f"A says {i}"} for i in ids])
    b_rows = [{"custom_id": i, "answer": f"B says {i}"} for i in ids[:-1]]
    job_b = job_in_home(studio_home, [*b_rows, {"custom_id": "q5", "answer": None}], name="two")
    db = open_store()
    template = "{{ prompt }}\n1: {{ answer_1 }}\n2: {{ answer_2 }}"
    job = P.start_pairwise(db, job_a, job_b, template, J.JudgeSettings(str(model))).job
    lines = {line["custom_id"]: line for line in input_lines(job)}
    assert list(lines) == ids[:-1]  # in key order; q5 failed on B: no pair
    swapped = P.swapped_keys(ids[:-1])
    assert len(swapped) == 2
    for key, line in lines.items():
        user = line["body"]["messages"][-1]["content"]
        first, second = ("B", "A") if key in swapped else ("A", "B")
        assert user == f"prompt {key}\n1: {first} says {key}\n2: {second} says {key}"
        assert line["body"]["metadata"]["swapped"] == str(key in swapped).lower()
        assert line["body"]["response_format"]["json_schema"]["schema"] == P.PAIRWISE_SCHEMA
    # The judge always prefers answer 1 (position bias), except on q0 and q1.
    answers = {k: json.dumps({"winner": "1", "reason": "first"}) for k in lines}
    answers["q0"] = json.dumps({"winner": "tie", "reason": "same"})
    answers["q1"] = "not json"
    answer_judge(job, answers)
    db.ingest_all(data_paths().jobs)
    verdicts = judged.pairwise_verdicts(db, job.job_id).set_index("key")
    for key in ("q2", "q3", "q4"):
        assert verdicts.loc[key, "choice"] == ("B" if key in swapped else "A")
    assert verdicts.loc["q0", "choice"] == "tie" and pd.isna(verdicts.loc["q1", "choice"])
    tally = judged.pairwise_tally(db, job.job_id)
    expected_b = len(swapped & {"q2", "q3", "q4"})
    assert (tally.a, tally.b, tally.tie, tally.not_graded) == (3 - expected_b, expected_b, 1, 1)
    share, low, high = tally.share("tie")
    assert share == pytest.approx(1 / 4) and low < share < high
    found = judged.judges(db, [job_b, job_a], "pairwise")
    assert list(found["judge_job"]) == [job.job_id]
    # Past MAX_PAIRS, the first pairs in key order are judged, and the page ends there.
    monkeypatch.setattr(P, "MAX_PAIRS", 3)
    capped = P.start_pairwise(db, job_a, job_b, template, J.JudgeSettings(str(model))).job
    assert [line["custom_id"] for line in input_lines(capped)] == ["q0", "q1", "q2"]


def test_a_pairwise_judge_of_two_variants_judges_their_pairs_item_by_item(
    studio_home, model, no_worker, monkeypatch
):
    """Issue 43: two slices of one job (an experiment's variants) are judged on Compare's
    pairs, one line per item in natural order (t2 before t10), and the judge is found
    again for that comparison (either way round) and for no other."""
    monkeypatch.setattr(P, "PAGE_ROWS", 4)  # pairs read four at a time: three pages
    items = [f"t{t}" for t in range(11)]
    rows = [
        {"custom_id": custom_id(t, p, 0), "prompt": f"q{t}", "answer": f"p{p} on t{t}"}
        for t in range(11)
        for p in (0, 1)
    ]
    rows[-1]["answer"] = None  # t10 failed on p1: no pair
    job = job_in_home(studio_home, rows)
    other = job_in_home(studio_home, rows, name="other")
    db = open_store()
    a, b = Side(job, VARIANT, "p1.m0"), Side(job, VARIANT, "p0.m0")
    template = "{{ prompt }}\n1: {{ answer_1 }}\n2: {{ answer_2 }}"
    started = P.start_pairwise(db, a, b, template, J.JudgeSettings(str(model)), key=ITEM).job
    spec = started.read_spec()
    assert spec.judge.graded == [job, job] and spec.judge.on == ITEM
    assert (spec.judge.split, spec.judge.values) == (VARIANT, ["p1.m0", "p0.m0"])
    assert spec.name.endswith("[variant=p1.m0] vs " + f"{job} [variant=p0.m0]")
    lines = {line["custom_id"]: line for line in input_lines(started)}
    assert list(lines) == items[:-1]  # in natural order; t10 failed on A: no pair
    swapped = P.swapped_keys(items[:-1])
    for key, line in lines.items():
        first, second = ("p0", "p1") if key in swapped else ("p1", "p0")
        user = line["body"]["messages"][-1]["content"]
        assert user == f"q{key[1:]}\n1: {first} on {key}\n2: {second} on {key}"
    answer_judge(started, {k: json.dumps({"winner": "1", "reason": "first"}) for k in lines})
    db.ingest_all(data_paths().jobs)
    verdicts = judged.pairwise_verdicts(db, started.job_id).set_index("key")
    assert list(verdicts.index) == items[:-1]
    assert all(verdicts.loc[k, "choice"] == ("B" if k in swapped else "A") for k in lines)
    found = pairwise_judges(db, a, b, ITEM)
    assert list(found["judge_job"]) == [started.job_id] and not found["flipped"].any()
    assert pairwise_judges(db, b, a, ITEM)["flipped"].tolist() == [True]
    assert pairwise_judges(db, a, Side(job, VARIANT, "p9.m0"), ITEM).empty
    assert pairwise_judges(db, Side(job), Side(other), "custom_id").empty
    two_jobs = P.start_pairwise(db, job, other, template, J.JudgeSettings(str(model))).job
    db.ingest_all(data_paths().jobs)
    assert list(pairwise_judges(db, a, b, ITEM)["judge_job"]) == [started.job_id]
    found = pairwise_judges(db, Side(other), Side(job), "custom_id")
    assert found["judge_job"].tolist() == [two_jobs.job_id] and found["flipped"].tolist() == [True]
    with pytest.raises(J.JudgeError, match="two different slices"):
        P.start_pairwise(db, a, a, template, J.JudgeSettings(str(model)), key=ITEM)
    with pytest.raises(J.JudgeError, match="one field of one job"):
        P.start_pairwise(
            db, a, Side(other, VARIANT, "p0.m0"), template, J.JudgeSettings(str(model))
        )


# -- agreement --------------------------------------------------------------------------------

# Ten results a person and a check both graded: 4 both pass, 1 person pass / check fail,
# 2 person fail / check pass, 3 both fail. Accuracy 7/10; people pass 5/10, the check 6/10,
# so chance agreement is .5 × .6 + .5 × .4 = .5 and kappa = (.7 − .5) / (1 − .5) = .4.
HAND = [("pass", True)] * 4 + [("pass", False)] + [("fail", True)] * 2 + [("fail", False)] * 3


def test_agreement_of_people_and_a_judge_against_a_hand_computed_example(
    studio_home, model, no_worker
):
    rows = [{"custom_id": f"r{n}", "answer": f"answer {n}"} for n in range(len(HAND) + 2)]
    graded = job_in_home(studio_home, rows)
    db = open_store()
    job = J.start_judge(db, graded, "{{ answer }}", J.JudgeSettings(str(model))).job
    answers = {f"r{n}": verdict("pass" if ok else "fail") for n, (_, ok) in enumerate(HAND)}
    answers["r10"], answers["r11"] = verdict("pass"), "garbled"
    answer_judge(job, answers)
    db.ingest_all(data_paths().jobs)
    for n, (person, _) in enumerate(HAND):
        save_label(db, graded, f"r{n}", "ana", Label(person))
    save_label(db, graded, "r10", "ana", Label("unsure"))  # left out, counted
    save_label(db, graded, "r11", "ana", Label("fail"))  # the judge did not grade it
    save_label(db, graded, "r0", "ben", Label("fail"))  # another reviewer
    name = job.read_spec().judge.check

    got = trust.check_agreement(db, [graded], name, reviewer="ana")
    assert got.items == 10 and got.agreed == 7
    assert got.accuracy == pytest.approx(0.7)
    assert got.kappa == pytest.approx(0.4)
    assert got.matrix.to_dict() == {
        "check: pass": {"person: pass": 4, "person: fail": 2},
        "check: fail": {"person: pass": 1, "person: fail": 3},
    }
    assert (got.unsure, got.not_graded) == (1, 1)
    assert list(got.disagreements["custom_id"]) == ["r4", "r5", "r6"]
    everyone = trust.check_agreement(db, [graded], name)
    assert everyone.items == 11 and everyone.agreed == 7  # ben's label on r0 disagrees

    sample = trust.review_disagreements(db, [graded], name, everyone, owner="ana@example.com")
    items = sample_items(db, sample.sample_id)
    assert list(items["custom_id"]) == ["r0", "r4", "r5", "r6"]  # each result once
    assert sample.name == f"{name}: people disagree"
    # who opened it for review owns it: only they (or an admin) change its schema
    assert owners.owner_of(db.human_dir, sample.sample_id) == "ana@example.com"


def test_agreement_with_a_rule_and_with_nothing_to_compare(studio_home):
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    grade_jobs(db, [graded], load_rules("rules:\n  - name: short\n    type: length\n    max: 3\n"))
    empty = trust.check_agreement(db, [graded], "short")
    assert (empty.items, empty.accuracy, empty.kappa) == (0, None, None)
    save_label(db, graded, "a", "ana", Label("fail"))  # the rule failed it too
    save_label(db, graded, "b", "ana", Label("fail"))  # the rule passed it ("No.")
    save_label(db, graded, "c", "ana", Label("fail"))  # failed request: not graded
    got = trust.check_agreement(db, [graded], "short")
    assert (got.items, got.agreed, got.not_graded) == (2, 1, 1)
    assert list(got.disagreements["custom_id"]) == ["b"]


def test_an_old_job_json_without_a_judge_still_loads(studio_home):
    graded = job_in_home(studio_home, ROWS)
    spec = JobFolder(Path(data_paths().jobs) / graded).read_spec()
    assert spec.judge is None


def test_a_rule_may_not_take_a_judges_name():
    from core.qa.rules import RulesError

    with pytest.raises(RulesError, match="how judges are named"):
        load_rules("rules:\n  - name: judge_a1b2c3\n    type: json\n")
    assert load_rules("rules:\n  - name: judge_tone\n    type: json\n").names == ["judge_tone"]


def test_a_verdict_that_contradicts_its_own_score_is_flagged_and_counted_apart(
    studio_home, model, no_worker
):
    """Issue 30, item 7: "pass, score 1, useless" is no pass; nor is "fail, score 5" a fail."""
    graded = job_in_home(studio_home, ROWS)
    db = open_store()
    job = J.start_judge(db, graded, J.DEFAULT_TEMPLATE, J.JudgeSettings(str(model))).job
    answers = {
        "a": verdict("pass", 1, "useless"),
        "b": verdict("fail", 5, "perfect"),
        "d": verdict("pass", 4, "good"),
    }
    answer_judge(job, answers)
    db.ingest_all(data_paths().jobs)
    name = job.read_spec().judge.check
    rates = checks.pass_rates(db, [graded], "all").set_index("rule")
    counted = ["passed", "failed", "not_graded", "contradicted"]
    assert rates.loc[name, counted].tolist() == [1, 0, 0, 2]
    assert rates.loc[name, "pass_rate"] == pytest.approx(1.0)
    got = judged.verdicts(db, [graded], name).set_index("custom_id")
    assert got.loc["a", "contradicts"] and pd.isna(got.loc["a", "passed"])
    assert not got.loc["d", "contradicts"] and got.loc["d", "passed"]
    flagged = R.page(db, R.ResultFilter(job_ids=[graded], checks={name: "contradicted"}))
    assert sorted(flagged["custom_id"]) == ["a", "b"]
    unread = R.page(db, R.ResultFilter(job_ids=[graded], checks={name: "not_graded"}))
    assert unread.empty
