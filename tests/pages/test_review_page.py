"""Review's labelling panel in AppTest (issue 30, item 10): a score key, a label of the
reviewer's own, and a refused label set; the browser walk is ``label_walk``
(tests/support/browser_review.py), in tests/browser/test_browser.py's restart walk."""

from __future__ import annotations

import json

from tests.support.links import open_link
from tests.support.pages import fragment_reruns, job_in_home, open_page


def _labelling(studio_home):
    job_in_home(studio_home)
    at = open_page("review.py")
    at.text_input(key="sample_name").set_value("check")
    at.button[0].click().run()  # the form's "Draw sample"
    at.text_input(key="reviewer").set_value("ana").run()
    return at


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def test_a_score_key_then_an_own_label_saves_both_and_moves_on(studio_home):
    at = _labelling(studio_home)
    labels_box = next(t for t in at.text_input if t.label.startswith("Labels, comma"))
    labels_box.set_value("off-topic, made up")
    _button(at, "Save my labels").click().run()
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    assert keys["o"].label == r"off\-topic" and keys["m"].label == "made up"  # as text
    _button(at, "4").click().run()
    assert _button(at, "4").proto.type == "primary"  # marked; the item stays
    assert any("Item 1 of 4" in m.value for m in at.markdown)
    keys["m"].click().run()
    assert not at.exception
    assert any("Item 2 of 4" in m.value for m in at.markdown)
    assert any("1 of 4 labelled" in p.proto.text for p in at.get("progress"))
    saved = json.loads((studio_home / "human" / "labels.jsonl").read_text(encoding="utf-8"))
    assert (saved["verdict"], saved["score"]) == ("made up", 4)
    set_file = (studio_home / "human" / "label_sets.jsonl").read_text(encoding="utf-8")
    assert json.loads(set_file)["labels"] == ["off-topic", "made up"]


def test_a_bad_label_set_is_refused_with_a_reason_and_nothing_saved(studio_home):
    at = _labelling(studio_home)
    labels_box = next(t for t in at.text_input if t.label.startswith("Labels, comma"))
    labels_box.set_value("fine, Unsure")
    _button(at, "Save my labels").click().run()
    shown = [e.value.replace("\\", "").replace("\u2060", "") for e in at.error]  # as text
    assert any("'Unsure' is a verdict already: pick another name" in e for e in shown), shown
    assert not (studio_home / "human" / "label_sets.jsonl").exists()
    verdicts = [b.label for b in at.button if b.proto.shortcut in ("p", "f", "u")]
    assert verdicts == ["Pass", "Fail", "Unsure"]  # and no other label


def test_labels_saved_twice_on_the_last_item_show_both_in_its_history_at_once(studio_home):
    at = _labelling(studio_home)
    for _ in range(3):
        at.button(key="next").click().run()
    assert any("Item 4 of 4" in m.value for m in at.markdown)
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    keys["p"].click().run()
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    keys["f"].click().run()  # the last item stays: its history reads both saves
    assert not at.exception
    assert any("Item 4 of 4" in m.value for m in at.markdown)
    assert [e.label for e in at.expander if e.label.startswith("Label history")] == [
        "Label history of this item (2 saves)"
    ]
    history = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert history["verdict"].tolist() == ["pass", "fail"]


def test_an_items_tags_and_comment_save_and_come_back_with_it_the_next_item_starts_empty(
    studio_home,
):
    """The form's fields are the same widgets for every item: filled with the shown item's
    saved label, empty for an item without one."""
    at = _labelling(studio_home)
    at.text_input(key="review_tags").set_value("short, polite")
    at.text_area(key="review_comment").set_value("fine")
    _button(at, "Pass").click().run()
    assert any("Item 2 of 4" in m.value for m in at.markdown)
    assert at.text_input(key="review_tags").value == ""
    assert at.text_area(key="review_comment").value == ""
    _button(at, "Previous").click().run()
    assert any("Item 1 of 4" in m.value for m in at.markdown)
    assert at.text_input(key="review_tags").value == "short, polite"
    assert at.text_area(key="review_comment").value == "fine"
    saved = json.loads((studio_home / "human" / "labels.jsonl").read_text(encoding="utf-8"))
    assert (saved["verdict"], saved["tags"], saved["comment"]) == (
        "pass",
        ["short", "polite"],
        "fine",
    )


def test_the_export_tab_downloads_a_fine_tuning_file_of_the_passing_items(studio_home, monkeypatch):
    """Issue 44 item 4: the sample's items labelled pass on the page come back as OpenAI
    chat fine-tuning lines (a corrected answer in place of the model's), and the page says
    what it left out and why."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    sent: dict[str, bytes] = {}
    original = MediaFileManager.add

    def record(self, data, mimetype, coordinates, file_name=None, **kw):
        sent[file_name] = data
        return original(self, data, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add", record)
    at = _labelling(studio_home)
    at.text_area(key="review_corrected").set_value("Corrected <b>answer</b>")
    _button(at, "Pass").click().run()  # item 1
    _button(at, "Fail").click().run()  # item 2; items 3 and 4 stay unlabelled
    sample_id = at.query_params["sample"]
    at = open_link("review.py", sample=sample_id, tab="Export")
    at.radio[0].set_value("Fine-tuning file (OpenAI chat JSONL)").run()
    at.button(key="review_export").click().run()
    assert not at.exception
    shown = " ".join(i.value for i in at.info).replace("\\", "").replace("\u2060", "")
    assert "1 example; left out: 2 not labelled, 1 labelled fail" in shown, shown
    name = f"{sample_id}.sft.jsonl"
    assert [b.label for b in at.download_button] == [f"Download {name} (1 example)"]
    (line,) = [json.loads(x) for x in sent[name].decode().splitlines()]
    assert line["messages"][-1] == {"role": "assistant", "content": "Corrected <b>answer</b>"}
    assert [m["role"] for m in line["messages"]] == ["user", "assistant"]
    assert not list(studio_home.glob("exports/*/*"))  # nothing stays behind


def _set_queue(at, names, overlap):
    box = next(t for t in at.text_area if t.label.startswith("Reviewers, comma"))
    box.set_value(names)
    next(n for n in at.number_input if n.label.startswith("Reviews per item")).set_value(overlap)
    _button(at, "Save the queue").click().run()


def test_a_queue_gives_each_reviewer_their_share_and_a_skip_puts_an_item_last(studio_home):
    """Issue 44 item 2: the 4 items shared out between ana and bo, one review each: ana
    sees her 2, skips the first (it comes back last), and Progress shows both shares."""
    at = _labelling(studio_home)
    _set_queue(at, "ana, bo", 1)
    assert not at.exception
    assert any("Your queue: 2 of the sample's 4 items" in c.value for c in at.caption)
    first = next(m.value for m in at.markdown if "Item 1 of 2" in m.value)
    _button(at, "Skip").click().run()
    assert not at.exception
    now = next(m.value for m in at.markdown if "Item 1 of 2" in m.value)
    assert now != first  # the other item is first now
    keys = {b.proto.shortcut: b for b in at.button if b.proto.shortcut}
    keys["p"].click().run()  # pass: saved, and on to the skipped one
    assert any("Item 2 of 2" in m.value for m in at.markdown)
    assert first.split("·")[-1] in next(m.value for m in at.markdown if "Item 2 of 2" in m.value)
    queues = (studio_home / "human" / "queues.jsonl").read_text().splitlines()
    sample_id = json.loads(queues[0])["sample_id"]
    shown = open_link("review.py", sample=sample_id, tab="Progress & agreement")
    queue = next(d.value for d in shown.dataframe if "assigned" in d.value.columns)
    assert queue.values.tolist() == [["ana", 2, 1, 1, 1], ["bo", 2, 0, 2, 0]]  # 1 put off


def test_a_queue_with_more_reviews_per_item_than_reviewers_is_refused_and_a_stranger_waits(
    studio_home,
):
    at = _labelling(studio_home)
    _set_queue(at, "bo, cy", 3)
    shown = [e.value.replace("\\", "") for e in at.error]
    assert any("an overlap of 3 needs at least 3 reviewers; 2 named" in e for e in shown), shown
    assert not (studio_home / "human" / "queues.jsonl").exists()
    _set_queue(at, "bo, cy", 2)
    assert any("shared out among bo, cy" in i.value for i in at.info)  # ana is not in it
    assert not [b for b in at.button if b.proto.shortcut == "p"]  # nothing to label


def _item(at) -> str:
    """The panel's "Item k of n · custom_id" line."""
    return next(m.value for m in at.markdown if m.value.startswith("**Item "))


def test_skip_reruns_the_panel_only_and_shows_the_next_item_then_the_skipped_one_last(
    studio_home,
):
    """Issue 44: Skip is the panel's rerun (a fragment), as the label keys are, not the
    page's: the next item takes the skipped one's place, progress counts the same, the
    skipped item comes last, and the page's next run reads that order from the skips'
    file."""
    at = _labelling(studio_home)
    _set_queue(at, "ana", 1)  # ana reviews all 4 items
    order = [_item(at).split(" · ")[-1]]
    for _ in range(3):
        at.button(key="next").click().run()
        order.append(_item(at).split(" · ")[-1])
    for _ in range(2):
        at.button(key="prev").click().run()
    _button(at, "Pass").click().run()  # item 2 labelled: on to item 3
    assert _item(at) == f"**Item 3 of 4** · {order[2]}"
    with fragment_reruns(at):
        _button(at, "Skip").click().run()
        assert not at.exception
        assert not [c for c in at.caption if "Your queue" in c.value]  # the page did not run
        assert _item(at) == f"**Item 3 of 4** · {order[3]}"  # the next one in its place
        assert [p.proto.text for p in at.get("progress")] == ["1 of 4 labelled"]
        at.button(key="next").click().run()
        assert _item(at) == f"**Item 4 of 4** · {order[2]}"  # the skipped one, last
    at.run()  # the page's run: the same order, read from the skips' file
    assert _item(at) == f"**Item 4 of 4** · {order[2]}"
    at.button(key="prev").click().run()
    assert _item(at) == f"**Item 3 of 4** · {order[3]}"
    assert any("1 of 4 labelled" in p.proto.text for p in at.get("progress"))
    sample_id = at.query_params["sample"]
    shown = open_link("review.py", sample=sample_id, tab="Progress & agreement")
    queue = next(d.value for d in shown.dataframe if "assigned" in d.value.columns)
    assert queue.values.tolist() == [["ana", 4, 1, 3, 1]]  # 1 put off
