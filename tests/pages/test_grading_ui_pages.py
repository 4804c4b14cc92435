"""The pages tests of tests/unit/test_grading_ui.py (split from it by kind; docs/tests.md).

Checks where people meet them: ``core grade``, exports with a column per rule, and the
Checks page (AppTest), Results' filter by check and the Dashboards chart."""

from __future__ import annotations

import pytest

from core.config import data_paths
from core.jobs.folder import JobFolder
from core.qa.grading import grade_jobs
from core.qa.rules import load_rules
from core.schemas import job_label
from core.store.db import Store
from tests.support.grading import ROWS, RULES
from tests.support.pages import job_in_home, open_page

pytestmark = pytest.mark.usefixtures("studio_home")


def test_checks_page_validates_runs_rules_and_shows_pass_rates(studio_home):
    job_id = job_in_home(studio_home, ROWS)
    JobFolder(data_paths().jobs / job_id).rename("sentiment week 48")
    at = open_page("checks.py")
    assert "rules:" in at.text_area(key="checks_rules").value  # an example to start from
    at.text_area(key="checks_rules").set_value("rules:\n  - name: x\n    type: nope\n").run()
    assert at.error and "cannot run" in at.error[0].value
    assert any("line 3, rule 1 ('x'): unknown type 'nope'" in t.value for t in at.text)
    assert at.button(key="checks_run").disabled
    at.text_area(key="checks_rules").set_value(RULES).run()
    assert not at.error
    at.button(key="checks_run").click().run()
    assert not at.exception
    assert "saved in each job's folder" in at.success[0].value
    table = at.dataframe[0].value.set_index("rule")
    assert table.loc["mentions_refund", "passed"] == 2
    assert table.loc["mentions_refund", "pass_rate"] == pytest.approx(2 / 3)
    assert table.loc["label", "not_graded"] == 2
    assert (data_paths().jobs / job_id / "rules.yaml").read_text(encoding="utf-8") == RULES
    at.selectbox(key="checks_rule").set_value("no_refusal").run()
    failures = at.dataframe[1].value  # answers in a table: text, never markdown
    assert list(failures["custom_id"]) == ["b"]
    assert failures["answer"].iloc[0] == "I'm sorry, but I can't help with that."
    # Each failure's job by its name beside its id (issue 30, item 12).
    assert failures.columns[0] == "job"
    assert failures["job"].iloc[0] == job_label(job_id, "sentiment week 48")

    # Jump to Results with the failures of no_refusal as the filter.
    at.button(key="checks_to_results").click().run()
    assert not at.exception
    assert at.selectbox(key="f_check").value == "no_refusal"
    assert list(at.dataframe[0].value["custom_id"]) == ["b"]


def test_checks_page_offers_saved_rules_and_draws_a_review_sample(studio_home):
    job_id = job_in_home(studio_home, ROWS)
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    grade_jobs(db, [job_id], load_rules(RULES), RULES)
    db.close()
    at = open_page("checks.py")
    assert at.text_area(key="checks_rules").value == RULES  # the job's saved rules
    at.text_area(key="checks_rules").set_value("rules: [{name: j, type: json}]").run()
    at.button(key="checks_load").click().run()
    assert at.text_area(key="checks_rules").value == RULES
    at.selectbox(key="checks_rule").set_value("mentions_refund").run()
    at.button(key="checks_to_review").click().run()
    assert not at.exception
    assert at.title[0].value == "Review"  # on the page that labels it
    from core.store import samples as sm

    db = Store(data_paths().database)
    samples = sm.list_samples(db)
    assert list(samples["name"]) == ["mentions_refund: failed"]
    assert at.session_state["sample_id"] == samples["sample_id"].iloc[0]
    items = sm.sample_items(db, samples["sample_id"].iloc[0])
    assert list(items["custom_id"]) == ["b"]
    db.close()


def test_pages_grade_stale_checks_in_the_background_and_say_so(studio_home):
    """Issue 26: a page never grades inside its render. With saved rules never graded (a
    new database) and the grading held up, Dashboards draws at once with a "Grading…"
    note; once the grading is done, Checks shows the pass rates it found."""
    import time

    from core.qa.grading import grading_now
    from ui.store import _open_store

    job_id = job_in_home(studio_home, ROWS)
    (data_paths().jobs / job_id / "rules.yaml").write_text(RULES, encoding="utf-8")
    app_store = _open_store(str(data_paths().database))  # the app's own (one per process)
    with app_store.writing("checks"):  # another grading is running: this one waits
        started = time.monotonic()
        at = open_page("dashboards.py")
        assert time.monotonic() - started < 60  # it did not wait for the grading
        notes = " ".join(c.value for c in at.caption)
        assert "Grading" in notes and "brought up to date" in notes
        assert grading_now(app_store, [job_id]) == [job_id]
    deadline = time.monotonic() + 60
    while grading_now(app_store, [job_id]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert grading_now(app_store, [job_id]) == []
    at = open_page("checks.py")
    assert not any("Grading" in c.value for c in at.caption)
    table = at.dataframe[0].value.set_index("rule")
    assert table.loc["mentions_refund", "passed"] == 2
