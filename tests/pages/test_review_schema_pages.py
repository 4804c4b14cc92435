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
    assert not [c for c in at.caption if c.value.startswith("Score (optional)")]
    assert "Keys 1–4 set it; the same key again clears it." in [shown(c.value) for c in at.caption]
    at.radio(key="review_answer_Tone").set_value("rude")
    at.multiselect(key="review_answer_Problems").select("too long").select("made up")
    keys = {b.proto.shortcut: b.label for b in at.button if b.proto.shortcut}
    assert [keys[k] for k in "1234"] == ["1 \\(useless\\)", "2", "3", "4 \\(perfect\\)"]
    _button(at, "4 \\(perfect\\)").click().run()  # key 4: the rating, the item stays
    assert any("Item 1 of 4" in m.value for m in at.markdown)
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
    assert _button(at, "4 \\(perfect\\)").proto.type == "primary"
    assert at.multiselect(key="review_answer_Problems").value == ["made up", "too long"]
    assert at.text_area(key="review_corrected").value == "Better."


def test_digit_keys_answer_the_first_rating_ten_by_zero_the_verdict_keys_kept(studio_home):
    """The first rating is a row of buttons with digit keys (0 for 10 on a 1..10 scale);
    the same key again clears it; a second rating stays a radio; P, F, U still save."""
    job_in_home(studio_home)
    at = open_page("review.py")
    at.text_input(key="sample_name").set_value("check")
    at.button[0].click().run()
    at.text_input(key="reviewer").set_value("ana").run()
    _save_schema(at, "rating: Quality | 1..10\nrating: Style | 0..10")
    assert not at.exception
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    assert {k: keys[k].label for k in "1234567890"} == {
        **{str(v): str(v) for v in range(1, 10)},
        "0": "10",
    }
    assert {"p", "f", "u", "n", "right"} <= set(keys)  # the verdicts' and moves' keys stay
    assert "Keys 1–9 and 0 for 10 set it; the same key again clears it." in [
        shown(c.value) for c in at.caption
    ]
    assert at.radio(key="review_answer_Style").options[-1] == "10"  # unkeyed: a radio
    keys["0"].click().run()
    assert _button(at, "10").proto.type == "primary"
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    keys["7"].click().run()
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    assert keys["7"].proto.type == "primary" and keys["0"].proto.type == "secondary"
    keys["7"].click().run()  # the same key again clears it
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    assert keys["7"].proto.type == "secondary"
    keys["3"].click().run()
    at.radio(key="review_answer_Style").set_value(10)
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    keys["p"].click().run()
    assert not at.exception
    assert any("Item 2 of 4" in m.value for m in at.markdown)
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    assert keys["3"].proto.type == "secondary"  # the next item starts empty
    saved = json.loads((studio_home / "human" / "labels.jsonl").read_text(encoding="utf-8"))
    assert (saved["verdict"], saved["answers"]) == ("pass", {"Quality": 3, "Style": 10})
