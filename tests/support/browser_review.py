"""Steps of the Review page in chromium that more than one browser test walks."""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page, expect

from core.jobs.folder import JobFolder
from core.schemas import job_label
from tests.support.browser import (
    choose,
    expect_no_exception,
    open_expander,
    open_page,
    screenshot,
    type_into,
    wait_idle,
)


def label_walk(page: Page, home: Path, shots: str, job_id: str | None = None) -> Walk:
    """On Review: draws a sample (of ``job_id``, else the job Review offers), sets two
    labels of the reviewer's own, then labels by key alone (:data:`WALK`), timing each key
    to the next item in the browser; checks what was saved."""
    open_page(page, "Review")
    if job_id is not None:  # in place of the job Review offers (the one open elsewhere)
        jobs = page.get_by_role("combobox", name="Jobs", exact=True)
        jobs.click()
        page.keyboard.press("Backspace")
        page.keyboard.press("Escape")
        # Picked as choose() picks, again if a rerun closes the list: beside a running job
        # on a loaded machine one did, and the option never showed (a fresh-clone run).
        choose(page, "Jobs", job_label(job_id, JobFolder(home / "jobs" / job_id).name))
    page.get_by_role("textbox", name="Sample name").fill("walk")  # open while none exist
    page.get_by_role("button", name="Draw sample").click()
    expect(page.get_by_text("Sample walk drawn", exact=False)).to_be_visible()
    type_into(page, "Your name (labels are kept per reviewer)", "ana")
    expect(page.get_by_text("Item 1 of", exact=False)).to_be_visible()
    open_expander(page, "Your own labels (beyond pass, fail, unsure)")
    type_into(page, re.compile("^Labels, comma-separated"), "off-topic, made up")
    page.get_by_role("button", name="Save my labels").click()
    expect(page.get_by_role("button", name="off-topic Shortcut O")).to_be_visible()
    expect(page.get_by_role("button", name="made up Shortcut M")).to_be_visible()
    wait_idle(page)
    screenshot(page, f"{shots}_1_labels_of_my_own")

    page.evaluate(TIMER)
    page.get_by_role("heading", name="Review", level=1).click()  # keys go to the page
    item, walk = 1, Walk([], [], [])
    for key, verdict in WALK:
        page.keyboard.press(key)
        what = f"marked {key}{key}" if verdict is None else f"item {item + 1}"
        shown = page.evaluate("what => window.__shown(what)", what)
        assert shown is not None, f"{what} not shown within 30 s of the key {key}"
        if verdict is None:  # a score: the item stays, its button marked
            walk.scores.append(shown)
            button = page.get_by_role("button", name=f"{key} Shortcut {key}", exact=True)
            expect(button).to_have_attribute("data-testid", "stBaseButton-primaryFormSubmit")
            wait_idle(page)
            continue
        item += 1
        (walk.labels if verdict else walk.moves).append(shown)
        expect(page.get_by_text(f"Item {item} of", exact=False)).to_be_visible()
        if item == 3:
            screenshot(page, f"{shots}_2_after_two_keys")
        wait_idle(page)  # the new item's buttons are up before its key (as a person reads)
    wait_idle(page)
    expect_no_exception(page)
    screenshot(page, f"{shots}_3_walked")
    print(f"{shots}: {walk.say()}")

    saved = [
        json.loads(line)
        for line in (home / "human" / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [(s["verdict"], s["score"]) for s in saved] == [
        ("pass", 3), ("fail", 2), ("unsure", 5), ("off-topic", None), ("made up", 4),
        ("pass", None),
    ]  # fmt: skip
    page.get_by_role("tab", name="Progress & agreement").click()
    expect(page.get_by_text("1 off-topic", exact=False).first).to_be_visible()
    wait_idle(page)
    screenshot(page, f"{shots}_4_progress")
    return walk


def typed_text_search_shows_work(page: Page) -> None:
    """Issue 30, item 11, on Results' "Similar to this" of an embeddings job (the typed-text
    choice open): a second text's search shows that it works, at once, and never the first
    text's results (greyed) meanwhile."""
    type_into(page, "Text", "I was charged twice")
    page.get_by_role("button", name="Embed and search").click()
    results = page.get_by_text("inputs most like the text", exact=False)
    expect(results).to_be_visible(timeout=300_000)
    wait_idle(page)
    screenshot(page, "embeddings_4_similar_first_text")
    page.evaluate(EMBED_RECORDER)
    page.get_by_role("textbox", name="Text", exact=True).fill("The app crashes when I log in")
    page.get_by_role("button", name="Embed and search").click()
    expect(results).to_be_visible(timeout=300_000)  # a warm engine answers in well under 1 s
    wait_idle(page)
    screenshot(page, "embeddings_5_similar_second_text")
    seen = page.evaluate("window.__embed")
    # The note and the table share one slot: the old results never show beside the note.
    # (A warm engine may answer before the browser draws the note at all: then the new
    # table replaces the old one in one redraw, and no state shows the note.)
    assert seen and not any(s["working"] and s["table"] for s in seen), seen
    assert seen[-1] == {"working": False, "table": True}, seen
    expect_no_exception(page)


# Records, in the page, when each key went down and when, after it, each "Item k of" and
# each highlighted form button (a score's) first showed. ``__shown(name)`` waits for one and
# gives its ms from the key (null after 30 s): the test does not poll the page meanwhile,
# which would take the page's thread from the redraw it times.
TIMER = """() => {
  let key = 0, marks = {}, waiting = {};
  const mark = name => {
    if (name in marks) return;
    marks[name] = performance.now() - key;
    if (waiting[name]) waiting[name](marks[name]);
  };
  const seen = () => {
    for (const el of document.querySelectorAll('[data-testid=stMarkdownContainer] strong')) {
      const m = /^Item (\\d+) of/.exec(el.textContent);
      if (m) mark('item ' + m[1]);
    }
    for (const el of document.querySelectorAll('[data-testid=stBaseButton-primaryFormSubmit]'))
      mark('marked ' + el.textContent);  // a button's text: its label, then its key
  };
  document.addEventListener('keydown', () => { key = performance.now(); marks = {}; }, true);
  new MutationObserver(seen).observe(document.body, {
    subtree: true, childList: true, characterData: true, attributeFilter: ['data-testid']});
  window.__shown = name => name in marks ? marks[name] : new Promise(done => {
    waiting[name] = done;
    setTimeout(() => done(null), 30000);
  });
}"""


# (key, what it does): a score key keeps the item; a label key saves it and moves on;
# Right moves on without a label (the browser's own redraw of the next item: the baseline).
# At least four keys of each kind, so that no median rests on one or two.
WALK = [("3", None), ("p", "pass"), ("ArrowRight", ""), ("2", None), ("f", "fail"),
        ("ArrowRight", ""), ("5", None), ("u", "unsure"), ("ArrowRight", ""), ("o", "off-topic"),
        ("4", None), ("m", "made up"), ("ArrowRight", ""), ("p", "pass")]  # fmt: skip


@dataclass
class Walk:
    """Times from a key to what it shows in the browser, in ms."""

    labels: list[float]  # a label key: saved, then the next item
    moves: list[float]  # Right: the next item, nothing saved
    scores: list[float]  # 1-5: the score's button marked, the item kept

    def say(self) -> str:
        """The times, for the log: `bench/review.py --browser` times the keys on a quiet
        machine against the issue's 200 ms (a timed test passed or failed with the load)."""
        return (
            f"key to next item, ms: labels {[round(t) for t in self.labels]} (median "
            f"{statistics.median(self.labels):.0f}); moves {[round(t) for t in self.moves]}; "
            f"key to score marked: {[round(t) for t in self.scores]}; "
            f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )


# The typed-text search, recorded in the page: whether the note that it works shows, and
# whether results are on show (a stale, greyed element is still in the page) meanwhile.
EMBED_RECORDER = """() => {
  window.__embed = [];
  const look = () => {
    const working = [...document.querySelectorAll('[data-testid=stAlert],[data-testid=stSpinner]')]
      .some(e => e.textContent.includes('Embedding'));  // a note or a spinner
    const table = document.body.textContent.includes('inputs most like the text');
    window.__embed.push({working, table});
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true,
                                                     characterData: true});
}"""
