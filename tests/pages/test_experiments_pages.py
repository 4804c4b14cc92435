"""The Experiments page (issue 43): an experiment's answers graded when its job has
stopped, the summary row per variant, the verdicts against a chosen baseline, the matrix
in its views; a running experiment shows its progress and no matrix yet."""

from __future__ import annotations

import json
from urllib.parse import parse_qs

import pytest

from core.config import data_paths
from core.experiments.runs import read_grades, read_state
from core.jobs.folder import JobFolder
from tests.support.experiments import capitals as config
from tests.support.experiments import capitals_answer as answers
from tests.support.experiments import experiment_in_home
from tests.support.links import open_link
from tests.support.pages import open_page, shown, texts

pytestmark = pytest.mark.usefixtures("studio_home")

N = 30  # items of the capitals experiment


def table(at, column: str):
    return next(d.value for d in at.dataframe if column in d.value.columns)


def test_a_finished_experiment_is_graded_and_shows_its_verdict_and_matrix(model):
    experiment_id = experiment_in_home(model, config(), answers, graded=False)
    at = open_page("experiments.py")
    assert read_grades(experiment_id) is not None  # the page graded the answers
    summary = table(at, "pass (every check, 95 % interval)")
    assert summary["variant"].tolist() == ["plain", "terse"]
    assert summary["pass (every check, 95 % interval)"].tolist() == [
        "20.0 % (9.5–37.3) of 30",
        "96.7 % (83.3–99.4) of 30",
    ]
    shown = texts(at)
    assert "terse passes every check 76.7 points more often than plain (p < 0.001)" in shown
    matrix = table(at, "terse")
    assert len(matrix) == N and matrix.loc[0, "plain"].startswith("Paris\n✓ icontains: paris")
    at.selectbox(key="exp_view").set_value("Different").run()
    assert table(at, "terse")["item"].tolist() == [f"item {t}" for t in range(6, 29)]
    at.selectbox(key="exp_baseline").set_value(1).run()
    assert "plain passes every check 76.7 points less often than terse" in texts(at)
    assert [b.label for b in at.download_button] == ["Export matrix CSV"]


def test_identical_variants_are_said_to_differ_by_nothing(model):
    def same(cid: str) -> dict:
        return {"answer": "Paris" if int(cid[1:].split(".")[0]) % 2 else "Lyon"}

    experiment_in_home(model, config(), same)
    at = open_page("experiments.py")
    assert "terse against plain on every check: no significant difference on 30 items" in texts(at)
    at.selectbox(key="exp_view").set_value("Different").run()
    assert table(at, "terse").empty


def test_a_running_experiment_shows_its_progress_and_no_matrix(model):
    experiment_in_home(model, config(3), answers, run=False)
    at = open_page("experiments.py")
    assert "0 of 6 answers" in at.get("progress")[0].proto.text
    assert "its answers are graded when it stops" in texts(at)
    assert not [d for d in at.dataframe if "terse" in d.value.columns]


def test_without_an_experiment_the_page_says_how_to_run_one():
    at = open_page("experiments.py")
    assert "python -m core experiment run FILE" in texts(at)


def test_the_same_file_run_twice_shows_its_trend(model):
    first = experiment_in_home(model, config(), answers)
    at = open_page("experiments.py")
    assert not [d for d in at.dataframe if "run" in d.value.columns]  # one run: no trend
    later = experiment_in_home(model, config(), lambda cid: {"answer": "Paris"})
    at = open_page("experiments.py")
    assert at.selectbox(key="exp_pick").value == later  # the newest first
    runs = table(at, "run")
    assert runs["run"].tolist() == [first, later]
    assert runs["plain"].tolist() == [20.0, 100.0] and runs["terse"].tolist() == [96.7, 100.0]


def test_a_cell_is_labelled_as_review_labels_a_result(model):
    experiment_id = experiment_in_home(model, config(3), answers)
    at = open_page("experiments.py")
    at.selectbox(key="exp_item").set_value(2).run()
    at.selectbox(key="exp_l_variant").set_value(1).run()
    at.radio(key="exp_l_verdict").set_value("fail").run()
    at.button(key="exp_l_save").click().run()
    assert "enter your reviewer name first" in texts(at)  # nothing saved without a name
    at.text_input(key="reviewer").input("ana").run()
    at.button(key="exp_l_save").click().run()
    assert "Labelled fail: terse on item 2." in texts(at)
    assert "Labelled ana: fail" in texts(at)  # under terse's answer, on this very rerun
    job_id = read_state(experiment_id).job_id
    saved = [
        json.loads(x)
        for f in data_paths().human.rglob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    labels = [
        (x["job_id"], x["custom_id"], x["reviewer"], x["verdict"])
        for x in saved
        if x.get("kind") == "label"
    ]
    assert labels == [(job_id, "t2.p1.m0", "ana", "fail")]  # the cell's own result


def test_a_row_clicked_in_the_matrix_opens_its_item(model):
    experiment_in_home(model, config(3), answers)
    at = open_page("experiments.py")
    assert at.selectbox(key="exp_item").value == 0
    at.session_state["exp_matrix"] = {"selection": {"rows": [2], "columns": []}}
    at.run()
    assert at.selectbox(key="exp_item").value == 2  # the row's item, opened below
    # The list still chooses: the same click, still selected, does not take it back.
    at.selectbox(key="exp_item").set_value(1).run()
    assert at.selectbox(key="exp_item").value == 1
    assert not at.exception


def test_answers_graded_again_show_on_the_next_rerun(model):
    """The page keeps its matrix and summary between reruns; an answer rewritten and
    graded again must still show on the very next one (the way such a cache goes wrong)."""
    experiment_id = experiment_in_home(model, config(3), answers)
    at = open_page("experiments.py")
    assert table(at, "terse").loc[0, "plain"].startswith("Paris\n✓ icontains: paris")
    assert table(at, "variant")["pass (every check, 95 % interval)"][0].startswith("100.0 %")
    job = JobFolder(data_paths().jobs / read_state(experiment_id).job_id)
    lines = job.output.read_text().splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if '"t0.p0.m0"' in x)
    lines[first] = lines[first].replace('"Paris"', '"Lyon!"')  # the same size: its time moves
    job.output.write_text("".join(lines))
    at.run()
    assert table(at, "terse").loc[0, "plain"].startswith("Lyon!\n")  # the answer, not yet graded
    at.button(key="exp_grade").click().run()  # only the grades file changes now
    assert table(at, "terse").loc[0, "plain"].startswith("Lyon!\n✗ icontains: paris")
    assert table(at, "variant")["pass (every check, 95 % interval)"][0].startswith("66.7 %")


def test_an_item_opens_beside_its_conversation_and_one_of_two_cells_is_preferred(model):
    def marked(cid: str) -> dict:  # markdown and HTML from a model: shown as written
        return {"answer": "**Paris** <b>x</b>"} if cid == "t1.p1.m0" else answers(cid)

    experiment_id = experiment_in_home(model, config(3), marked)
    at = open_page("experiments.py")
    at.selectbox(key="exp_item").set_value(1).run()
    assert [t.value for t in at.text][:3] == [
        "Capital of France?",  # the one conversation both prompts sent, its role named
        "Paris\n✓ icontains: paris\n4 tokens · 51 ms",
        "**Paris** <b>x</b>\n✓ icontains: paris\n3 tokens",
    ]
    assert "user" in [c.value for c in at.caption]
    assert "<b>" not in "".join(m.value for m in at.markdown)
    at.button(key="exp_p_B").click().run()
    assert "enter your reviewer name first" in texts(at)  # nothing saved without a name
    at.text_input(key="reviewer").input("ana").run()
    at.button(key="exp_p_B").click().run()
    assert "Preferred B is better on item 1." in texts(at)
    assert "A 0, B 1, tie 0 (Compare's tally). Kept under comparison cmp_" in texts(at)
    assert at.button(key="exp_p_B").proto.type == "primary"  # her choice, as Compare shows it
    saved = [
        json.loads(x)
        for f in data_paths().human.rglob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    job_id = read_state(experiment_id).job_id
    assert [(x["kind"], x["job_b"], x["custom_id_a"], x["custom_id_b"], x["choice"])
            for x in saved] == [("preference", job_id, "t1.p0.m0", "t1.p1.m0", "B")]  # fmt: skip


def answers_shown(at) -> list[str]:
    """Compare's two answers of the pair shown, A then B (as plain text)."""
    return [t.value for t in at.text if "answer to item" in t.value]


def test_two_variants_open_in_compare_paired_item_by_item(model):
    """The Experiments page's link opens Compare on the experiment's job with side A the
    baseline's answers and side B the other variant's, each row one test under both; a
    preference made there is the one the Experiments page tallies."""

    def said(cid: str) -> dict:
        t, p = cid.split(".")[:2]
        return {"answer": f"{['plain', 'terse'][int(p[1:])]} answer to item {t[1:]}"}

    experiment_id = experiment_in_home(model, config(3), said)
    at = open_page("experiments.py")
    at.selectbox(key="exp_baseline").set_value(1).run()  # terse the baseline: side A
    link = at.get("page_link")[-1].proto
    assert (link.page, link.label) == ("compare", "Open in Compare")  # its url path
    params = {k: v[0] for k, v in parse_qs(link.query_string).items()}
    at = open_link("compare.py", **params)
    assert at.radio(key="cmp_mode").value == "slices"
    assert at.selectbox(key="cmp_key").value == "item"
    rows = next(d.value for d in at.dataframe if "answer_a" in d.value.columns)
    assert rows[["key", "answer_a", "answer_b"]].values.tolist() == [
        [f"t{i}", f"terse answer to item {i}", f"plain answer to item {i}"] for i in range(3)
    ]
    assert "Pair 1 of 3" in texts(at)
    assert answers_shown(at) == ["terse answer to item 0", "plain answer to item 0"]
    assert at.selectbox(key="cmp_va").options == ["plain (p0.m0)", "terse (p1.m0)"]
    assert shown(at.subheader[0].value).endswith("[variant=terse]")  # A: the variant's label
    at.text_input(key="reviewer").input("ana").run()
    at.button(key="pref_A").click().run()
    assert answers_shown(at) == ["terse answer to item 1", "plain answer to item 1"]  # next
    at = open_page("experiments.py")
    at.selectbox(key="exp_p_a").set_value(1).run()
    at.selectbox(key="exp_p_b").set_value(0).run()
    assert "A 1, B 0, tie 0 (Compare's tally)" in texts(at)  # one comparison, two pages
    job_id = read_state(experiment_id).job_id
    assert params["job"] == job_id


def test_a_pairwise_judge_of_two_variants_shows_its_tally_as_compare_does(model, no_worker):
    """Issue 43: a pairwise judge started on two of the experiment's variants (Compare's
    two slices by variant, paired by item) shows its tally on the Experiments page, the
    sides named by their variants, with Compare's numbers; without one, nothing of it."""
    from core.qa import judge as J
    from core.qa import pairwise as P
    from core.store.compare import ITEM, VARIANT, Side
    from tests.support.judge import answer_judge, open_store
    from ui.jobs import job_label
    from ui.text import escape

    experiment_id = experiment_in_home(model, config(4), answers)
    at = open_page("experiments.py")
    assert "Pairwise judges" not in [s.value for s in at.subheader]
    assert not [m for m in at.metric if m.label.startswith("Judge")]
    job = read_state(experiment_id).job_id
    a, b = Side(job, VARIANT, "p1.m0"), Side(job, VARIANT, "p0.m0")  # A terse, B plain
    template = "{{ prompt }}\n1: {{ answer_1 }}\n2: {{ answer_2 }}"
    started = P.start_pairwise(
        open_store(), a, b, template, J.JudgeSettings(str(model)), key=ITEM
    ).job
    swapped = P.swapped_keys([f"t{t}" for t in range(4)])  # answer 1 is B's there
    winner = {
        k: "1" if (k in swapped) == (s == "B") else "2" for k, s in (("t0", "A"), ("t1", "A"))
    }
    said = {k: json.dumps({"winner": w, "reason": "-"}) for k, w in winner.items()}
    said |= {"t2": json.dumps({"winner": "tie", "reason": "-"}), "t3": "no verdict here"}
    answer_judge(started, said)
    open_store()  # its verdicts indexed (in the app, the job folders' watcher does it)
    at = open_page("experiments.py")
    assert not at.exception
    assert "Pairwise judges" in [s.value for s in at.subheader]
    assert "**A: terse · B: plain**" in [m.value for m in at.markdown]
    metrics = {m.label: m.value for m in at.metric if m.label.startswith(("Judge", "Not"))}
    assert metrics == {
        "Judge prefers terse": "2 (67%)",
        "Judge prefers plain": "0 (0%)",
        "Judge: tie": "1 (33%)",
        "Not graded": "1",
    }
    assert [c.value for c in at.caption if c.value.endswith(" verdicts")] == [
        escape(f"{job_label(started.job_id)} · completed · 4 verdicts")
    ]
    link = {"mode": "slices", "job": job, "split": "variant", "va": "p1.m0", "vb": "p0.m0"}
    at = open_link("compare.py", **link, on="item")  # Compare: the same numbers
    shown_there = {m.label: m.value for m in at.metric if m.label.startswith(("Judge", "Not"))}
    assert list(shown_there.values()) == list(metrics.values())
