"""A sample's label schema and guidelines on Review (issue 44 items 1 and 5): the owner's
bad schema refused by its line, a good one asked with its widgets, guidelines shown as
text beside the item, and the answers saved with the label and back with the item."""

from __future__ import annotations

import json

from tests.support.pages import job_in_home, open_page, shown

GUIDELINES = "Be **strict**: <b>no</b> [link](http://example.com)\nSecond line."
QUESTIONS = """single: Tone | friendly, rude
multiple: Problems | made up, off-topic, too long
rating: Helpfulness | 1..4 | useless..perfect
corrected: Rewrite it"""


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def _save_schema(at, questions, guidelines=""):
    next(t for t in at.text_area if t.label.startswith("Questions, one a line")).set_value(
        questions
    )
    next(t for t in at.text_area if t.label.startswith("Guidelines")).set_value(guidelines)
    _button(at, "Save the schema").click().run()


def test_a_schema_is_asked_beside_its_guidelines_and_its_answers_saved_with_the_label(
    studio_home,
):
    job_in_home(studio_home)
    at = open_page("review.py")
    at.text_input(key="sample_name").set_value("check")
    at.button[0].click().run()  # the form's "Draw sample"
    at.text_input(key="reviewer").set_value("ana").run()
    schemas = studio_home / "human" / "label_schemas.jsonl"

    _save_schema(at, "comment: Notes\nsingle: Tone | rude, rude")
    errors = [shown(e.value) for e in at.error]
    assert "line 2: question 'Tone': the option 'rude' is given twice" in errors, errors
    assert not schemas.exists()  # nothing written
    scores = [b.label for b in at.button if b.proto.shortcut in ("1", "2", "3", "4", "5")]
    assert scores == ["1", "2", "3", "4", "5"]  # the default label still

    _save_schema(at, QUESTIONS, GUIDELINES)
    assert not at.exception
    assert GUIDELINES in [t.value for t in at.text]  # plain text, as typed
    assert not [m for m in at.markdown if "strict" in m.value]  # never read as markdown
    assert not [b for b in at.button if b.proto.shortcut in ("1", "2", "3", "4", "5")]
    at.radio(key="review_answer_Tone").set_value("rude")
    at.multiselect(key="review_answer_Problems").select("too long").select("made up")
    rating = at.radio(key="review_answer_Helpfulness")
    assert rating.options == ["1 \\(useless\\)", "2", "3", "4 \\(perfect\\)"]
    rating.set_value(4)
    at.text_area(key="review_corrected").set_value("Better.")
    _button(at, "Fail").click().run()
    assert not at.exception
    assert any("Item 2 of 4" in m.value for m in at.markdown)
    assert at.radio(key="review_answer_Tone").value is None  # the next item starts empty
    assert at.multiselect(key="review_answer_Problems").value == []

    saved = json.loads((studio_home / "human" / "labels.jsonl").read_text(encoding="utf-8"))
    assert saved["verdict"] == "fail" and saved["corrected_answer"] == "Better."
    assert saved["answers"] == {
        "Tone": "rude",
        "Problems": ["made up", "too long"],  # the options' order
        "Helpfulness": 4,
    }
    _button(at, "Previous").click().run()
    assert at.radio(key="review_answer_Tone").value == "rude"
    assert at.radio(key="review_answer_Helpfulness").value == 4
    assert at.multiselect(key="review_answer_Problems").value == ["made up", "too long"]
    assert at.text_area(key="review_corrected").value == "Better."
