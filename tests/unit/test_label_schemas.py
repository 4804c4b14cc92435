"""Label schemas and guidelines (issue 44 items 1 and 5): a sample's questions read from
the owner's text and kept in their file, every bad schema refused by its line and question
with nothing written, answers checked against the schema at save time, and the answers
through the labels file, a rebuilt index, the SFT export and agreement."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from core.human import label_schemas as lsc
from core.human import questions as qs
from core.human.files import LABEL_SCHEMAS, LABELS, read_from
from core.store import agreement as ag
from core.store.db import Store
from core.store.review import Label, ReviewError, get_label, labels, record_label, save_label
from core.store.samples import sample_items
from core.store.training import export_dataset

SCHEMA = """single: Tone | friendly, neutral, rude
multiple: Problems | made up, off-topic, too long
rating: Helpfulness | 1..5 | useless..perfect
corrected: Rewrite the answer
comment: Anything else"""


@pytest.fixture
def db(sampled_store):
    return sampled_store  # (tests/conftest.py)


def test_a_schema_is_read_from_text_kept_and_the_latest_of_a_sample_wins(tmp_path):
    assert lsc.schema_of(tmp_path, "s1") == lsc.DEFAULT  # no schema: the default label
    schema = lsc.set_schema(tmp_path, "s1", SCHEMA, "  Be strict.\n<b>Plain</b> text.  ", "ana")
    assert [(q.type, q.title) for q in schema.questions] == [
        ("single", "Tone"),
        ("multiple", "Problems"),
        ("rating", "Helpfulness"),
        ("corrected", "Rewrite the answer"),
        ("comment", "Anything else"),
    ]
    rating = schema.questions[2]
    assert (rating.scale, rating.low_label, rating.high_label) == (
        [1, 2, 3, 4, 5],
        "useless",
        "perfect",
    )
    assert schema.guidelines == "Be strict.\n<b>Plain</b> text."  # as text, trimmed only
    assert qs.questions_text(schema.questions) == SCHEMA  # written back the way it was read
    lsc.set_schema(tmp_path, "s2", "comment: Why", "", "bo")
    assert lsc.schema_of(tmp_path, "s1") == schema
    lsc.set_schema(tmp_path, "s1", "", "", "ana")  # cleared: the default again
    assert lsc.schema_of(tmp_path, "s1").empty
    assert lsc.schema_of(tmp_path, "s2").questions[0].title == "Why"


@pytest.mark.parametrize(
    "text, guidelines, why",
    [
        ("single: Tone", "", "line 1: question 'Tone': a choice needs options"),
        (
            "comment: A\nmultiple: P | a, b, A",
            "",
            "line 2: question 'P': the option 'A' is given twice",
        ),
        ("rating: Stars | 3..3", "", "line 1: question 'Stars': a scale of 3..3 has one value"),
        ("rating: Stars | 5..1", "", "question 'Stars': a scale of 5..1 has one value or none"),
        ("rating: Stars | 0..20", "", "question 'Stars': a scale has at most 11 values"),
        ("rating: Stars | one..5", "", "question 'Stars': write its scale as low..high in whole"),
        ("single: T | a, " + "x" * 41, "", "question 'T': an option has at most 40 characters"),
        ("single: T | only", "", "question 'T': a single choice needs two options"),
        ("poll: T | a, b", "", "line 1: start with a type and a colon"),
        ("comment: T\ncomment: U", "", "a schema has one comment question at most"),
        ("comment: Same\nrating: same | 1..3", "", "question 'same' is asked twice"),
        ("rating: Score | 1..5", "", "question 'Score' has a title the label or its agreement"),
        ("single: verdict | a, b", "", "question 'verdict' has a title the label or its"),
        ("comment: " + "t" * 201, "", "a title has at most 200 characters"),
        ("comment: T", "g" * (qs.GUIDELINES_CHARS + 1), "guidelines have at most 20,000"),
    ],
)
def test_a_bad_schema_is_refused_by_its_line_and_question_and_nothing_is_written(
    tmp_path, text, guidelines, why
):
    with pytest.raises(qs.SchemaError, match=why.replace("(", r"\(").replace(".", r"\.")):
        lsc.set_schema(tmp_path, "s1", text, guidelines, "ana")
    assert not (tmp_path / LABEL_SCHEMAS).exists()


def test_answers_are_checked_against_the_samples_schema_and_kept_with_the_label(db):
    store, job_id, sample_id, _ = db
    lsc.set_schema(store.human_dir, sample_id, SCHEMA, "", "owner")
    answers = {"Tone": "rude", "Problems": ["too long", "made up"], "Helpfulness": 2}
    label = Label("fail", comment="meh", corrected_answer="Better.", answers=answers)
    save_label(store, job_id, "r1", "ana", label, sample_id)
    kept = get_label(store, job_id, "r1", "ana")
    assert kept.answers == {"Tone": "rude", "Problems": ["made up", "too long"], "Helpfulness": 2}
    assert (kept.comment, kept.corrected_answer) == ("meh", "Better.")
    for bad, why in [
        ({"Tone": "angry"}, "question 'Tone': 'angry' is not one of its options"),
        ({"Problems": ["typos"]}, "question 'Problems': 'typos' is not one of its options"),
        ({"Helpfulness": 6}, "question 'Helpfulness': 6 is off its scale 1..5"),
        ({"Helpfulness": "5"}, "question 'Helpfulness': a rating is a whole number"),
        ({"Length": "long"}, "'Length' is not a choice or rating of this sample's schema"),
    ]:
        before = (store.human_dir / LABELS).read_bytes()
        with pytest.raises(ReviewError, match=why):
            record_label(store, job_id, "r2", "ana", Label("pass", answers=bad), sample_id)
        assert (store.human_dir / LABELS).read_bytes() == before  # nothing written
    with pytest.raises(ReviewError, match="'Tone' is not a choice or rating"):
        record_label(store, job_id, "r2", "ana", Label("pass", answers={"Tone": "rude"}))


def test_a_ten_megabyte_corrected_answer_is_refused_in_words_and_nothing_is_written(db):
    store, job_id, sample_id, _ = db
    huge = "x" * 10_000_000
    with pytest.raises(ReviewError, match=r"the corrected answer is 10\.0 MB: at most 1 MB"):
        record_label(store, job_id, "r1", "ana", Label("pass", corrected_answer=huge), sample_id)
    with pytest.raises(ReviewError, match=r"the comment is 10\.0 MB"):
        record_label(store, job_id, "r1", "ana", Label("pass", comment=huge), sample_id)
    assert not (store.human_dir / LABELS).exists()
    record_label(store, job_id, "r1", "ana", Label("pass", corrected_answer="é" * 500_000))


def test_answers_survive_a_rebuilt_index_and_old_label_lines_still_load(
    db,
):
    store, job_id, sample_id, tmp_path = db
    folder = store.human_dir
    # a label line as written before schemas: no answers field
    old = {
        "kind": "label", "job_id": job_id, "custom_id": "r0", "reviewer": "bo",
        "verdict": "pass", "score": 3, "tags": [], "at": "2026-12-01T10:00:00Z",
    }  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LABELS).write_text(json.dumps(old) + "\n", encoding="utf-8")
    lsc.set_schema(folder, sample_id, SCHEMA, "", "owner")
    # an item bo has not labelled: the sample's order is random, and r0 may come first
    first = next(c for c in sample_items(store, sample_id)["custom_id"] if c != "r0")
    label = Label("pass", corrected_answer="Fixed.", answers={"Tone": "friendly"})
    save_label(store, job_id, first, "ana", label, sample_id)
    export_dataset(store, sample_id, tmp_path / "ds")
    rows = pq.read_table(tmp_path / "ds" / "train.parquet").to_pylist()
    (given,) = next(r for r in rows if r["custom_id"] == first)["labels"]
    assert json.loads(given["answers"]) == {"Tone": "friendly"}
    assert given["corrected_answer"] == "Fixed."
    store.close()
    (tmp_path / "studio.duckdb").unlink()  # the index is rebuilt from the files
    store = Store(tmp_path / "studio.duckdb")
    store.sync_human()
    assert [r.answers for _, r in read_from(folder / LABELS, 0, 0).records] == [
        {},
        {"Tone": "friendly"},
    ]
    assert get_label(store, job_id, "r0", "bo") == Label("pass", 3)
    assert get_label(store, job_id, first, "ana").answers == {"Tone": "friendly"}
    table = labels(store).set_index("reviewer")
    assert json.loads(table.loc["ana", "answers"]) == {"Tone": "friendly"}
    assert table["answers"].isna()["bo"]
    # what the SFT export and the dataset read as the item's correction (core.store.training)
    assert table.loc["ana", "corrected_answer"] == "Fixed."
    store.close()


def test_the_schemas_choices_and_ratings_feed_agreement_per_question(db):
    store, job_id, sample_id, _ = db
    lsc.set_schema(store.human_dir, sample_id, SCHEMA, "", "owner")
    items = list(sample_items(store, sample_id)["custom_id"])
    given = {
        "ana": [("rude", 1), ("friendly", 5), ("neutral", 3), ("rude", 2)],
        "bo": [("rude", 1), ("friendly", 4), ("neutral", 3), ("friendly", 2)],
    }
    problems = {
        "ana": [["made up"], ["off-topic", "too long"], ["too long"], []],
        "bo": [["made up"], ["off-topic"], ["made up"], ["too long"]],
    }
    for reviewer, answers in given.items():
        for n, (custom_id, (tone, stars)) in enumerate(zip(items, answers, strict=True)):
            chosen = {"Tone": tone, "Helpfulness": stars, "Problems": problems[reviewer][n]}
            label = Label("pass", answers=chosen)
            record_label(store, job_id, custom_id, reviewer, label, sample_id)
    store.sync_human()
    found = ag.sample_agreement(store, sample_id)
    by_title = {a.question: a for a in found.questions}
    assert set(by_title) == {"Verdict", "Score (1–5)", "Tone", "Problems", "Helpfulness"}
    assert (by_title["Tone"].level, by_title["Helpfulness"].level) == ("nominal", "ordinal")
    # Problems by MASI over the three items both answered: ({made up} twice), ({off-topic,
    # too long}, {off-topic}): 2/3, ({too long}, {made up}): 1; n 6 ({made up} x3, the
    # others once). Observed 2 * 2/3 + 2 = 10/3; expected 2 * (3 + 3 + 3 + 1 + 2/3 + 2/3)
    # = 68/3 ({made up} is disjoint from all three others): alpha = 1 - 5 * 10/68 = 9/34.
    assert by_title["Problems"].level == "masi" and by_title["Problems"].items == 3
    assert by_title["Problems"].alpha == pytest.approx(9 / 34)
    assert "Problems α" in found.pairs.columns
    assert by_title["Tone"].items == 4 and by_title["Helpfulness"].items == 4
    frame = ag.with_answers(
        labels(store, sample_id), ag.schema_questions(lsc.schema_of(store.human_dir, sample_id))
    )
    direct = ag.question_alphas(
        frame, ag.schema_questions(lsc.schema_of(store.human_dir, sample_id))
    )
    assert by_title["Tone"].alpha == pytest.approx(direct[0].alpha)
    assert 0 < by_title["Tone"].alpha < 1  # three of four items agree
    assert by_title["Helpfulness"].alpha > by_title["Tone"].alpha  # 4 against 5 is close
    assert "Tone α" in found.pairs.columns


def test_the_cli_shows_sets_refuses_by_line_and_clears_a_samples_schema(studio_home, tmp_path):
    from core.config import data_paths
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample
    from tests.support.cli import cli
    from tests.support.pages import job_in_home

    rows = [{"custom_id": c, "prompt": f"Q {c}?", "answer": f"A {c}"} for c in "abcd"]
    job_id = job_in_home(studio_home, rows)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=4)
    sample_id = create_sample(store, "s", definition).sample_id
    store.close()
    shown = cli("review", "schema", sample_id)
    assert shown.returncode == 0, shown.stderr
    assert "pass / fail / unsure with a score (no schema)" in shown.stdout

    questions = tmp_path / "questions.txt"
    questions.write_text("single: Tone | polite, rude\nrating: Accuracy | 1..5\n")
    guidelines = tmp_path / "guidelines.txt"
    guidelines.write_text("Judge the <b>answer</b>, not the prompt.")
    done = cli("review", "schema", sample_id, "--questions", str(questions),
               "--guidelines", str(guidelines), "--by", "olga")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "2 questions" in done.stdout and "single: Tone | polite, rude" in done.stdout
    assert "Judge the <b>answer</b>, not the prompt." in done.stdout  # as text
    kept = lsc.schema_of(data_paths().human, sample_id)
    assert [q.title for q in kept.questions] == ["Tone", "Accuracy"]

    questions.write_text("single: Tone | polite, rude\nrating: Accuracy | 5..5\n")
    refused = cli("review", "schema", sample_id, "--questions", str(questions))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "error: line 2:" in refused.stderr
    assert lsc.schema_of(data_paths().human, sample_id) == kept  # nothing written
    assert cli("review", "schema", "nope").returncode == 2

    cleared = cli("review", "schema", sample_id, "--clear", "--json")
    assert cleared.returncode == 0 and json.loads(cleared.stdout)["questions"] == []


@pytest.mark.parametrize(
    ("scale", "keys", "hint"),
    [
        (
            (1, 5),
            {v: str(v) for v in range(1, 6)},
            "Keys 1–5 set it; the same key again clears it.",
        ),
        (
            (1, 10),
            {**{v: str(v) for v in range(1, 10)}, 10: "0"},
            "Keys 1–9 and 0 for 10 set it; the same key again clears it.",
        ),
        (
            (0, 10),
            {v: str(v) for v in range(10)},
            "Keys 0–9 set it; the same key again clears it; 10 by a click.",
        ),
        (
            (-2, 2),
            {0: "0", 1: "1", 2: "2"},
            "Keys 0–2 set it; the same key again clears it; -2, -1 by a click.",
        ),
        ((-3, -1), {}, "No key on this scale: click a value (-3, -2, -1)."),
    ],
)
def test_a_ratings_digit_keys_are_its_values_digits_and_0_for_10_without_a_0(scale, keys, hint):
    rating = qs.Question(type="rating", title="Quality", low=scale[0], high=scale[1])
    assert qs.rating_keys(rating) == keys
    assert qs.rating_key_hint(rating) == hint
    assert not set(keys.values()) & {k.lower() for k in "PFUNSRC"}  # never a verdict's key


def test_the_digit_keys_answer_the_first_rating_that_has_one():
    schema = qs.LabelSchema(
        questions=qs.parse_questions(
            "single: Tone | a, b\nrating: Below | -3..-1\nrating: First | 1..5\nrating: Next | 1..5"
        )
    )
    assert schema.keyed_rating is not None and schema.keyed_rating.title == "First"
    assert qs.LabelSchema(questions=qs.parse_questions("single: Tone | a, b")).keyed_rating is None
