"""Review in a queue at scale: the next item after a key, and agreement over 20,000 labels.

    .venv/bin/python bench/review.py [--items 10000] [--reviewers 5] [--overlap 2]
                                     [--presses 200] [--runs 5]
    .venv/bin/python bench/review.py --browser [--presses 30] [--skips 5]

Builds a studio data folder in a scratch folder: a finished job of ``--items`` results (the
real worker with a scripted executor, ``tests/support/jobs.py``), ingested into the real
DuckDB store, a sample of every result, a label schema (a single choice, a multiple choice
and a rating), a queue of ``--reviewers`` reviewers with ``--overlap`` reviews per item, and
every assigned item labelled by its reviewers (items x overlap labels, the verdict, a score
and the schema's answers, most of them agreeing) less ``--presses`` of one reviewer's,
which the timed presses then give.

Times, through the functions Review calls:

- a key press in the queue (the issue's goal: the next item within 200 ms): the label
  saved as the panel's callback saves it (``record_label`` not yet fsynced, then
  ``index_in_background``), then what the panel's fragment does to show the next item
  (the queue's labelled count and next open item from the session's labels, the item's
  row and conversation, its label history from the index); the store's indexing thread
  runs its passes meanwhile, as in the app. Median and p95 over ``--presses``.
- what a page run does for the queue (a new tab and a switch of sample rerun the page, as
  Skip's key did before issue 44; it reruns the panel's fragment since: the sample's items,
  the queue, the reviewer's share in queue order with the skips last, the schema, the
  reviewer's labels), median of ``--runs``. On a checkout before ``review.queue_items``,
  the page's code of then.
- agreement over the labels (``sample_agreement``, what the Statistics tab and ``core
  review agreement`` show: alpha per question with its bootstrap interval, per pair, the
  disagreements): cold (a store just opened) and the median of ``--runs`` warm (goal: under
  1 s).

With ``--browser``, the same data folder and, in place of the functions, the real app
(``streamlit run server.py`` over it, as the browser tests start it) and Review's queue
opened as the first reviewer in headless chromium (Debian's, driven by Playwright) on
their first open item: ``--presses`` P keys (pass: the label saved, the next item; the
panel's fragment reruns) and ``--skips`` S keys (Skip: the item last, the next in its place;
the fragment reruns since issue 44, the page before), each timed in the page from the
keydown to the frame after the next item's number, custom_id and answer are in it, and split
by the page's WebSocket messages into the rerun request, the server's work up to the
message bringing the item, and the browser's drawing.

Prints each figure against its goal, the load average and the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.machine import cpu_model
from bench.scratch import scratch_folder
from core.human import label_schemas as lsc
from core.human import queues as qu
from core.store import agreement as ag
from core.store import review as rv
from core.store import samples as sm
from core.store.db import Store
from core.store.results import ResultFilter
from tests.support.jobs import finished_job

SCHEMA = """single: Tone | friendly, neutral, rude
multiple: Problems | made up, off-topic, too long
rating: Helpfulness | 1..5 | useless..perfect"""
TONES = ("friendly", "neutral", "rude")
PROBLEMS = ("made up", "off-topic", "too long")
VERDICTS = ("pass", "fail", "unsure")


def answer(rng: random.Random, truth: dict, agree: float = 0.8) -> rv.Label:
    """A reviewer's label of an item whose 'true' label is ``truth``: each answer that
    truth's with probability ``agree``, else any value."""

    def pick(value, values):
        return value if rng.random() < agree else rng.choice(values)

    problems = [p for p in PROBLEMS if (p in truth["problems"]) == (rng.random() < agree)]
    answers = {
        "Tone": pick(truth["tone"], TONES),
        "Helpfulness": pick(truth["help"], (1, 2, 3, 4, 5)),
        "Problems": problems,
    }
    return rv.Label(
        pick(truth["verdict"], VERDICTS),
        pick(truth["help"], (1, 2, 3, 4, 5)),
        answers={k: v for k, v in answers.items() if v != []},
    )


def build(folder: Path, items: int, reviewers: int, overlap: int, held: int):
    """The data folder; returns the store, the sample, the queue, and the first reviewer's
    labels held back for the presses (key, label)."""
    start = time.perf_counter()
    rows = [
        {"custom_id": f"item-{n:05d}", "prompt": f"Question {n}: what is {n} + {n}?",
         "answer": f"The answer is {2 * n}." + " It is even." * (n % 7)}
        for n in range(items)
    ]  # fmt: skip
    job = finished_job(folder, rows)
    store = Store(folder / "studio.duckdb")
    store.ingest(job)
    print(f"job of {items:,} results written by the worker and ingested: "
          f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    definition = sm.SampleDefinition(filter=ResultFilter(job_ids=[job.job_id]), size=items)
    sample_id = sm.create_sample(store, "queue bench", definition).sample_id
    lsc.set_schema(store.human_dir, sample_id, SCHEMA, "Label the tone first.", "owner")
    names = ", ".join(f"reviewer {i + 1}" for i in range(reviewers))
    queue = qu.set_queue(store.human_dir, sample_id, names, overlap, "owner")
    keys = list(zip(*_columns(sm.sample_items(store, sample_id)), strict=True))
    rng = random.Random(0)
    first = queue.reviewers[0]
    mine = queue.assigned(keys, first)
    held_keys = mine[len(mine) - held :]
    held_labels: list[rv.Label] = []
    start = time.perf_counter()
    saved = 0
    for position, key in enumerate(keys):
        truth = {
            "verdict": rng.choice(VERDICTS), "tone": rng.choice(TONES),
            "help": rng.randint(1, 5), "problems": set(rng.sample(PROBLEMS, rng.randint(0, 2))),
        }  # fmt: skip
        for who in queue.reviewers_of(position):
            label = answer(rng, truth)
            if who == first and key in held_keys:
                held_labels.append(label)
                continue
            rv.record_label(store, *key, who, label, sample_id, durable=False)
            saved += 1
    store.sync_human()
    print(f"{saved:,} labels saved and indexed: {time.perf_counter() - start:.1f} s")
    return store, sample_id, queue, list(zip(held_keys, held_labels, strict=True))


def _columns(items):
    return items["job_id"], items["custom_id"]


def page_run(store: Store, sample_id: str, reviewer: str):
    """What Review's page run does for a reviewer in a queue (``pages/review.py``'s
    ``labelling`` and ``load_labels``): returns the reviewer's items in queue order and
    their labels."""
    items = sm.sample_items(store, sample_id)
    queue = qu.queue_of(store.human_dir, sample_id)
    assert queue is not None
    if hasattr(rv, "queue_items"):
        items = rv.queue_items(store, queue, items, reviewer)
    else:  # a checkout before it: the page's code of then
        keys = list(zip(*_columns(items), strict=True))
        put_off = qu.skipped(store.human_dir, sample_id, reviewer)
        order = qu.queue_order(queue, keys, reviewer, put_off)
        items = items.set_index(["job_id", "custom_id"], drop=False).loc[order]
        items = items.reset_index(drop=True)
    lsc.schema_of(store.human_dir, sample_id)
    return items, rv.sample_labels(store, sample_id, reviewer)


def press(store, sample_id, reviewer, items, labels, pos, label) -> int:
    """One verdict key on Review's panel: the label saved as ``ui/review_panel.py``'s
    ``_save`` saves it, then the fragment's work for the next item; returns its position."""
    item = tuple(items.iloc[pos][["job_id", "custom_id"]])  # the callback's argument
    rv.record_label(store, *item, reviewer, label, sample_id, durable=False)
    labels[item] = label
    rv.index_in_background(store)
    pos = min(pos + 1, len(items) - 1)
    # the fragment's rerun: progress, the next open item, the item shown, its history
    keys = list(zip(*_columns(items), strict=True))
    sum(k in labels for k in keys)
    open_items = [i for i, k in enumerate(keys) if k not in labels]
    next(iter(i for i in open_items if i > pos), open_items[0] if open_items else pos)
    shown = items.iloc[pos]
    json.loads(shown["messages"] or "null")
    rv.label_history(store, *keys[pos])
    return pos


def ms(seconds: list[float]) -> tuple[float, float]:
    """Median and p95 in milliseconds."""
    values = sorted(seconds)
    p95 = values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]
    return statistics.median(values) * 1000, p95 * 1000


# -- the browser: the real app, a key pressed in headless chromium ----------------------------

# Patches the page's WebSocket before Streamlit opens it: the time of every message sent
# (the key's rerun request) and received (the server's deltas), to split a press's time.
WS_LOG = """(() => {
  const log = window.__ws = {sent: [], recv: []};
  const Native = window.WebSocket;
  const send = Native.prototype.send;
  Native.prototype.send = function (data) {
    log.sent.push(performance.now());
    return send.call(this, data);
  };
  window.WebSocket = new Proxy(Native, {construct(target, args) {
    const socket = new target(...args);
    socket.addEventListener('message', () => log.recv.push(performance.now()));
    return socket;
  }});
})();"""

# Armed before each press: the keydown's time (the log emptied then), and the time the
# main block first holds every expected text (a DOM mutation), then the next frame's.
ARM = """expected => {
  const press = window.__press = {};
  addEventListener('keydown', () => {
    press.key = performance.now();
    window.__ws.sent.length = 0;
    window.__ws.recv.length = 0;
  }, {capture: true, once: true});
  const main = document.querySelector('[data-testid=stMain]');
  const watch = new MutationObserver(() => {
    if (press.key === undefined || !expected.every(t => main.textContent.includes(t))) return;
    watch.disconnect();
    press.text = performance.now();
    press.received = window.__ws.recv.length;
    requestAnimationFrame(() => { press.painted = performance.now(); });
  });
  watch.observe(main, {subtree: true, childList: true, characterData: true});
}"""

IDLE = """() => document.querySelector('[data-testid=stApp]')
  ?.dataset.testScriptState === 'notRunning'"""


def shown_text(items, pos: int) -> list[str]:
    """What shows that the item at ``pos`` is on the page: its custom_id (the panel's
    "Item k of n · id") and its answer's first sentence (unique per item)."""
    row = items.iloc[pos]
    return [f"Item {pos + 1} of {len(items)}", row["custom_id"], row["answer"].split(" It")[0]]


def browser_presses(folder: Path, items, reviewer: str, sample_id: str, pos: int, args):
    """Starts the app on the bench's data folder, opens Review's queue as ``reviewer`` on
    their first open item and times ``args.presses`` P keys (pass: saved, next item) and
    ``args.skips`` S keys (Skip: the item put last), each from the keydown to the frame
    after the next item's text is in the page. Returns rows of (key, times in ms)."""
    from urllib.parse import quote

    import psutil
    from playwright.sync_api import sync_playwright

    from tests.support.browser import CHROMIUM_ARGS, StreamlitServer
    from ui.sign_in import REVIEWER_COOKIE

    server = StreamlitServer(folder, folder / "logs")
    (folder / "logs").mkdir(exist_ok=True)
    start = time.perf_counter()
    server.start()
    rows, server_cpu = [], {}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS
            )
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.add_cookies(
                [{"name": REVIEWER_COOKIE, "value": quote(reviewer, safe=""), "url": server.url}]
            )
            context.add_init_script(WS_LOG)
            page = context.new_page()
            page.set_default_timeout(120_000)
            page.goto(f"{server.url}/review?sample={sample_id}&item={pos + 1}")
            main = page.get_by_test_id("stMain")
            for text in shown_text(items, pos):
                main.get_by_text(text, exact=False).first.wait_for()
            page.wait_for_function(IDLE)
            print(f"app started and Review's queue shown: {time.perf_counter() - start:.1f} s")
            process = psutil.Process(server.process.pid)
            for key, count in (("p", args.presses), ("s", args.skips)):
                cpu = process.cpu_times()
                for _ in range(count):
                    page.wait_for_timeout(300)  # a reviewer's pace; the last run's end
                    page.wait_for_function(IDLE)
                    # P labels the item and shows the next; S puts it last: the next shows
                    expected = shown_text(items, pos + 1)
                    if key == "s":
                        expected[0] = f"Item {pos + 1} of {len(items)}"
                    page.evaluate(ARM, expected)
                    page.keyboard.press(key)
                    page.wait_for_function("() => window.__press.painted !== undefined")
                    press, log = page.evaluate("() => [window.__press, window.__ws]")
                    rows.append((key, split(press, log)))
                    if key == "p":
                        pos += 1
                    else:
                        items = skipped(items, pos)
                used = process.cpu_times()
                server_cpu[key] = (used.user - cpu.user) + (used.system - cpu.system)
            browser.close()
    finally:
        server.stop()
    return rows, server_cpu


def skipped(items, pos: int):
    """The queue after Skip: the item at ``pos`` last."""
    order = [*range(pos), *range(pos + 1, len(items)), pos]
    return items.iloc[order].reset_index(drop=True)


def split(press: dict, log: dict) -> dict[str, float]:
    """A press's times in ms: ``total`` keydown to the frame after the text; ``request``
    keydown to the rerun request sent; ``server`` that request to the message that brought
    the text (the callback and the script up to the item); ``draw`` that message to the
    frame (the browser applying the deltas and painting)."""
    sent = log["sent"][0] if log["sent"] else press["key"]
    brought = log["recv"][press["received"] - 1] if press["received"] else sent
    return {
        "total": press["painted"] - press["key"],
        "request": sent - press["key"],
        "server": brought - sent,
        "draw": press["painted"] - brought,
    }


def browser_main(args) -> int:
    """``--browser``: the key press in the real app, in chromium."""
    folder = scratch_folder("bench_review_browser_")
    store, sample_id, queue, held = build(
        folder, args.items, args.reviewers, args.overlap, args.presses + args.skips + 1
    )
    reviewer = queue.reviewers[0]
    items, labels = page_run(store, sample_id, reviewer)
    pos = len(items) - len(held)
    assert not any(k in labels for k, _ in held)
    total = int(store.query("SELECT count(*) AS n FROM reviews")["n"].iloc[0])
    store.close()  # the app's server opens the index
    rows, server_cpu = browser_presses(folder, items, reviewer, sample_id, pos, args)
    print(f"\n{args.items:,} items, {len(queue.reviewers)} reviewers, overlap {queue.overlap}: "
          f"{reviewer!r} has {len(items):,} items; {total:,} labels in the index")  # fmt: skip
    names = {"p": "P key (pass: saved, the next item; the panel's fragment reruns)",
             "s": "S key (Skip: the item last, the next in its place)"}  # fmt: skip
    for key in ("p", "s"):
        times = [t for k, t in rows if k == key]
        if not times:
            continue
        p50, p95 = ms([t["total"] / 1000 for t in times])
        parts = ", ".join(
            f"{part} {statistics.median(t[part] for t in times):.0f}"
            for part in ("request", "server", "draw")
        )
        print(f"{names[key]}, {len(times)} presses, keydown to the next item's text painted: "
              f"median {p50:.0f} ms, p95 {p95:.0f} ms, max "
              f"{max(t['total'] for t in times):.0f} ms (goal: under 200 ms); "
              f"medians of its parts: {parts} ms; the app's server process "
              f"{server_cpu[key] / len(times) * 1000:.0f} ms of CPU a key")  # fmt: skip
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cpu_model()}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--reviewers", type=int, default=5)
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--presses", type=int, help="default: 200; 30 with --browser")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--browser",
        action="store_true",
        help="time the keys in the real app in headless chromium instead",
    )
    parser.add_argument("--skips", type=int, default=5, help="S keys timed with --browser")
    args = parser.parse_args()
    if args.presses is None:
        args.presses = 30 if args.browser else 200
    if args.browser:
        return browser_main(args)
    folder = scratch_folder("bench_review_")
    store, sample_id, queue, held = build(
        folder, args.items, args.reviewers, args.overlap, args.presses
    )
    reviewer = queue.reviewers[0]

    runs = []
    for _ in range(args.runs):
        start = time.perf_counter()
        items, labels = page_run(store, sample_id, reviewer)
        runs.append(time.perf_counter() - start)
    pos = len(items) - len(held)
    assert not any(k in labels for k, _ in held)
    times = []
    for (key, label), _ in zip(held, range(args.presses), strict=False):
        assert tuple(items.iloc[pos][["job_id", "custom_id"]]) == key
        start = time.perf_counter()
        pos = press(store, sample_id, reviewer, items, labels, pos, label)
        times.append(time.perf_counter() - start)
    rv.wait_indexed(store)
    total = int(store.query("SELECT count(*) AS n FROM reviews")["n"].iloc[0])

    p50, p95 = ms(times)
    print(f"\n{args.items:,} items, {len(queue.reviewers)} reviewers, overlap {queue.overlap}: "
          f"{reviewer!r} has {len(items):,} items; {total:,} labels in the index")  # fmt: skip
    print(f"key press (save + next item), {len(times)} presses: median {p50:.1f} ms, "
          f"p95 {p95:.1f} ms, max {max(times) * 1000:.1f} ms (goal: under 200 ms)")  # fmt: skip
    print(f"a page run's queue part (a new tab, another sample): median "
          f"{statistics.median(runs) * 1000:.0f} ms of {len(runs)}")  # fmt: skip

    store.close()
    cold_store = Store(folder / "studio.duckdb")
    start = time.perf_counter()
    found = ag.sample_agreement(cold_store, sample_id)
    cold = time.perf_counter() - start
    warm = []
    for _ in range(args.runs):
        start = time.perf_counter()
        ag.sample_agreement(cold_store, sample_id)
        warm.append(time.perf_counter() - start)
    print(f"agreement over {total:,} labels ({len(found.pairs)} pairs, "
          f"{len(found.disagreements):,} disagreements): cold {cold * 1000:.0f} ms, "
          f"warm median {statistics.median(warm) * 1000:.0f} ms of {args.runs} "
          "(goal: under 1,000 ms)")  # fmt: skip
    for got in found.questions:
        level = getattr(ag, "LEVELS", {}).get(got.level, got.level)
        print(f"  {got.question} ({level}): {got.describe()}")
    cold_store.close()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {cpu_model()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
