"""Review labels: written to a file, indexed in DuckDB; pass rate (Wilson interval), kappa."""

from __future__ import annotations

import re

import pytest

from core.human.label_sets import LabelSetError, own_labels, save_own_labels, shortcut_keys
from core.store.db import Store
from core.store.review import (
    Label,
    ReviewError,
    agreement,
    cohen_kappa,
    get_label,
    labels,
    parse_tags,
    pass_rate,
    progress,
    record_label,
    reviewer_rows,
    save_label,
    tally,
    wilson,
)
from core.store.samples import sample_items


@pytest.fixture
def db(sampled_store):
    return sampled_store  # (tests/conftest.py)


def test_a_label_is_saved_replaced_and_survives_a_restart(db):
    store, job_id, sample_id, tmp_path = db
    label = Label("fail", 2, parse_tags("tone, facts,tone, "), "too long", "Shorter.")
    save_label(store, job_id, "r1", "ana", label, sample_id)
    save_label(store, job_id, "r1", "ana", Label("pass", 5, ("tone", "facts")), sample_id)
    store.close()
    store = Store(tmp_path / "studio.duckdb")
    assert get_label(store, job_id, "r1", "ana") == Label("pass", 5, ("tone", "facts"))
    assert len(labels(store)) == 1
    assert get_label(store, job_id, "r1", "bob") is None


def test_a_label_recorded_by_a_key_is_in_its_file_at_once_and_indexed_at_the_next_sync(db):
    """Review's keys record the label (file, fsynced) and index it after the next item is
    drawn: the file has it in between."""
    store, job_id, sample_id, _ = db
    record_label(store, job_id, "r2", "ana", Label("fail"), sample_id)
    assert '"verdict":"fail"' in (store.human_dir / "labels.jsonl").read_text(encoding="utf-8")
    assert get_label(store, job_id, "r2", "ana") is None  # not indexed yet
    store.sync_human()
    assert get_label(store, job_id, "r2", "ana") == Label("fail")
    with pytest.raises(ReviewError, match="verdict must be one of"):
        record_label(store, job_id, "r2", "ana", Label("maybe"), sample_id)


def test_bad_labels_are_refused_with_a_reason(db):
    store, job_id, _, _ = db
    with pytest.raises(ReviewError, match="reviewer name"):
        save_label(store, job_id, "r1", "  ", Label("pass"))
    with pytest.raises(ReviewError, match="verdict"):
        save_label(store, job_id, "r1", "ana", Label("great"))
    with pytest.raises(ReviewError, match="between 1 and 5"):
        save_label(store, job_id, "r1", "ana", Label("pass", 9))


def test_progress_and_pass_rate_of_a_sample(db):
    store, job_id, sample_id, _ = db
    items = list(sample_items(store, sample_id)["custom_id"])
    assert progress(store, sample_id, "ana") == (0, 4)
    for cid, verdict in zip(items, ["pass", "pass", "fail"], strict=False):
        save_label(store, job_id, cid, "ana", Label(verdict), sample_id)
    assert progress(store, sample_id, "ana") == (3, 4)
    rate = pass_rate(store, sample_id, "ana")
    assert (rate.passed, rate.failed, rate.unsure, rate.decided) == (2, 1, 0, 3)
    low, high = rate.interval
    assert low < 2 / 3 < high
    assert "67% pass (2 of 3; 95% CI" in rate.describe()
    assert pass_rate(store, sample_id, "nobody").describe() == "no pass/fail verdicts yet"
    rows = reviewer_rows(store, sample_id, ["ana", "nobody"])
    assert rows == [
        {"reviewer": "ana", "labelled": 3, "of": 4, "pass rate": rate.describe()},
        {"reviewer": "nobody", "labelled": 0, "of": 4, "pass rate": "no pass/fail verdicts yet"},
    ]


def test_wilson_interval_matches_the_textbook_values():
    low, high = wilson(8, 10)
    assert round(low, 3) == 0.490 and round(high, 3) == 0.943
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(10, 10)[1] == 1.0


def test_cohen_kappa_on_known_tables():
    a = ["pass"] * 20 + ["fail"] * 5 + ["pass"] * 10 + ["fail"] * 15
    b = ["pass"] * 20 + ["pass"] * 5 + ["fail"] * 10 + ["fail"] * 15
    assert round(cohen_kappa(a, b), 3) == 0.4
    assert cohen_kappa(["pass", "fail"], ["pass", "fail"]) == 1.0
    assert cohen_kappa(["pass"], ["pass"]) == 1.0
    assert cohen_kappa([], []) is None


def test_agreement_uses_only_items_both_reviewers_labelled(db):
    store, job_id, _, _ = db
    for cid, a, b in [("r0", "pass", "pass"), ("r1", "fail", "fail"), ("r2", "pass", "fail")]:
        save_label(store, job_id, cid, "ana", Label(a))
        save_label(store, job_id, cid, "bob", Label(b))
    save_label(store, job_id, "r3", "ana", Label("pass"))  # bob did not label r3
    result = agreement(store, "ana", "bob")
    assert (result.items, result.agreed) == (3, 2)
    assert round(result.kappa, 3) == 0.4
    assert result.table.loc["ana (A): pass", "bob (B): fail"] == 1
    # Issue 58, item 17: both sides name their reviewer (B's columns were unlabelled).
    assert list(result.table.columns) == ["bob (B): fail", "bob (B): pass"]
    assert list(result.table.index) == ["ana (A): fail", "ana (A): pass"]


def test_tally_per_job_and_reviewer(db):
    store, job_id, _, _ = db
    save_label(store, job_id, "r0", "ana", Label("pass", 4))
    save_label(store, job_id, "r1", "ana", Label("fail", 2))
    save_label(store, job_id, "r1", "bob", Label("unsure"))
    by_job = tally(store).set_index("job_id").loc[job_id]
    assert (by_job["passed"], by_job["failed"], by_job["unsure"]) == (1, 1, 1)
    assert by_job["pass_rate"] == 0.5 and by_job["mean_score"] == 3
    assert list(tally(store, "reviewer")["reviewer"]) == ["ana", "bob"]


def test_own_labels_are_kept_in_a_file_and_labels_with_them_counted_apart(db):
    store, job_id, sample_id, tmp_path = db
    items = list(sample_items(store, sample_id)["custom_id"])
    assert save_own_labels(store.human_dir, "ana", " off-topic, Made up,off-topic ,") == (
        "off-topic",
        "Made up",
    )
    save_label(store, job_id, items[0], "ana", Label("off-topic"), sample_id)
    save_label(store, job_id, items[1], "ana", Label("Made up", 2), sample_id)
    save_label(store, job_id, items[2], "ana", Label("pass"), sample_id)
    with pytest.raises(ReviewError, match=r"verdict must be one of pass, fail, unsure$"):
        save_label(store, job_id, items[0], "bob", Label("off-topic"))  # ana's, not bob's
    rate = pass_rate(store, sample_id)
    assert (rate.passed, rate.own) == (1, {"off-topic": 1, "Made up": 1})
    assert rate.describe().endswith("0 unsure; 1 Made up; 1 off-topic")
    assert tally(store, "reviewer")["own_labels"].tolist() == ["Made up=1; off-topic=1"]
    store.close()
    (tmp_path / "studio.duckdb").unlink()  # a rebuilt index loses neither
    store = Store(tmp_path / "studio.duckdb")
    assert own_labels(store.human_dir, "ana") == ("off-topic", "Made up")
    assert get_label(store, job_id, items[1], "ana") == Label("Made up", 2)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("ok, bell\x07", "control characters"),
        ("ok, zero\u200bwidth", "control characters"),
        ("x" * 41, "at most 40 characters"),
        ("off-topic, Pass", "'Pass' is a verdict already"),
        (",".join(f"l{i}" for i in range(10)), "at most 9 labels"),
    ],
)
def test_bad_own_label_names_are_refused_with_a_reason(db, text, why):
    store = db[0]
    with pytest.raises(LabelSetError, match=re.escape(why)):
        save_own_labels(store.human_dir, "ana", text)
    assert own_labels(store.human_dir, "ana") == ()  # nothing written


def test_own_labels_take_the_first_free_letter_of_their_name_as_key():
    assert shortcut_keys(("off-topic", "Other", "unclear", "42", "rude")) == {
        "off-topic": "O", "Other": "T", "unclear": "L", "42": None, "rude": "D",
    }  # fmt: skip
