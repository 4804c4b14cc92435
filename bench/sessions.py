"""Sessions side by side: reviewers saving labels while another session exports everything.

    .venv/bin/python bench/sessions.py [--rows 1000000] [--reviewers 8] [--every 1.0]

One store (the UI process's, as every Streamlit session shares it) is filled with synthetic
results (``bench/results_store.py``'s ``fill``). The export of every result (``core``'s
own ``export_results``) is timed alone, then again while ``--reviewers`` threads, one per
simulated session, each save a label every ``--every`` seconds, from a moment of their own
(a person labels every few seconds: 8 reviewers at 1 s are several times a team's pace),
as Review's keys do: the label is written to its file (``record_label``, not yet fsynced:
a crash of the app keeps it) and kept in the session, which shows it, then the index is
asked for it (``index_in_background``: its pass fsyncs the file, then indexes the line).
A save's time is what a reviewer waits for: until the label is in its file and shown.
Each reviewer then waits for the index to hold its label (``wait_indexed``, no CPU) and
notes how long that took: the label is on disk by then.
Prints whether every label was saved (each reviewer's last label of each item is what the
index holds once its last pass ended, and each save is in the label history once), the
saves' p50 and p95 with no export running and during the export, the CPU the saves and
their indexing take with no export, the index's writes (a transaction each), the index's
lag, and the export's time alone and during the reviewers; targets: every label saved,
p95 under 200 ms, the export within 10 % of its time alone. On a checkout before
``wait_indexed`` each save is indexed at once, as ``save_label`` did (its index lag: that
sync), so it runs on an older checkout too (before and after).
"""

from __future__ import annotations

import argparse
import inspect
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results_store import fill
from bench.scratch import scratch_folder
from core.store import human_index, review
from core.store.db import Store
from core.store.export import export_results
from core.store.results import ResultFilter
from core.store.review import Label, record_label

VERDICTS = ("pass", "fail", "unsure")
WRITES: list[int] = []  # labels per index write (each a transaction of its statements)


def _counted(apply):
    """The index's label write, counted: how many writes the saves cost."""

    def counted_apply(cur, found):
        if found:
            WRITES.append(len(found))
        return apply(cur, found)

    return counted_apply


human_index._apply_labels = _counted(human_index._apply_labels)


class Reviewer(threading.Thread):
    """One session's reviewer: saves a label every ``every`` seconds until stopped, and
    keeps what it saved last per item and how long each save took."""

    def __init__(self, store: Store, name: str, items: list[tuple[str, str]], every: float):
        super().__init__(name=name, daemon=True)
        self.store, self.items, self.every = store, items, every
        self.saved: dict[tuple[str, str], str] = {}  # (job_id, custom_id) -> last verdict
        self.times: list[tuple[float, float]] = []  # (started, seconds) per save
        self.lags: list[float] = []  # seconds from each save's start until it was indexed
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        rng = random.Random(self.name)
        # People do not save in step: each reviewer's first save comes at a moment of its own
        # (started together, eight reviewers' saves fall in one burst, that one sync takes).
        self.stop.wait(rng.uniform(0, self.every))
        while not self.stop.is_set():
            item, verdict = rng.choice(self.items), rng.choice(VERDICTS)
            started = time.perf_counter()
            try:
                label = Label(verdict, tags=("bench",))
                if "durable" in inspect.signature(record_label).parameters:
                    record_label(self.store, *item, self.name, label, durable=False)
                else:  # before the index pass fsynced: each save fsynced its line
                    record_label(self.store, *item, self.name, label)
                self.saved[item] = verdict  # the session's copy: Review shows it from there
                saved = time.perf_counter()
                if hasattr(review, "wait_indexed"):
                    indexed = review.wait_indexed(
                        self.store, review.index_in_background(self.store)
                    )
                else:  # before the indexing thread: each save synced at once (save_label)
                    self.store.sync_human()
                    indexed = True
            except Exception as exc:  # counted: every label must be saved
                self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                if not indexed:
                    self.failures.append(f"not indexed: {item}")
                self.times.append((started, saved - started))
                self.lags.append(time.perf_counter() - started)
            self.stop.wait(max(self.every - (time.perf_counter() - started), 0))


def export_seconds(store: Store, job_ids: list[str], path: Path, fmt: str) -> float:
    started = time.perf_counter()
    export_results(store, ResultFilter(job_ids=job_ids), path, fmt)
    return time.perf_counter() - started


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if values else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reviewers", type=int, default=8)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between saves")
    parser.add_argument("--format", default="csv", choices=("csv", "parquet", "jsonl"))
    parser.add_argument("--runs", type=int, default=2, help="exports alone and during")
    args = parser.parse_args()
    folder = scratch_folder("bench_sessions_")
    store = Store(folder / "studio.duckdb")
    started = time.perf_counter()
    job_ids = fill(store, args.rows)
    print(f"filled {args.rows:,} results in {time.perf_counter() - started:.1f} s", flush=True)
    items = [
        (str(j), str(c))
        for j, c in store.query("SELECT job_id, custom_id FROM results USING SAMPLE 2000").values
    ]
    target = folder / f"export.{args.format}"

    alone = [export_seconds(store, job_ids, target, args.format) for _ in range(args.runs)]
    print("export alone:  " + ", ".join(f"{s:.2f} s" for s in alone), flush=True)

    reviewers = [Reviewer(store, f"reviewer-{k}", items, args.every) for k in range(args.reviewers)]
    for reviewer in reviewers:
        reviewer.start()
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(max(5.0, 5 * args.every))  # saves with no export running, to compare with
    # what the saves cost (the process has nothing else to do): CPU seconds a second
    reviewers_cpu = (time.process_time() - cpu) / (time.perf_counter() - wall)
    during, windows = [], []
    for _ in range(args.runs):
        window_start = time.perf_counter()
        during.append(export_seconds(store, job_ids, target, args.format))
        windows.append((window_start, time.perf_counter()))
    for reviewer in reviewers:
        reviewer.stop.set()
    for reviewer in reviewers:
        reviewer.join()
    print("export during: " + ", ".join(f"{s:.2f} s" for s in during), flush=True)

    if hasattr(review, "wait_indexed"):
        review.wait_indexed(store)  # the last pass (the reviewers each waited for theirs)
    # Every label saved: each reviewer's last verdict of each item is what the index holds,
    # and each save is one line of the label history.
    history = store.query(
        "SELECT count(*) AS n FROM review_history WHERE reviewer LIKE 'reviewer-%'"
    )
    stored = {
        (j, c, r): v for j, c, r, v in store.query(
            "SELECT job_id, custom_id, reviewer, verdict FROM reviews"
        ).values
    }  # fmt: skip
    expected = {(*item, r.name): v for r in reviewers for item, v in r.saved.items()}
    failures = [f for r in reviewers for f in r.failures]
    saves_made = sum(len(r.times) for r in reviewers)
    all_saved = not failures and stored == expected and int(history["n"][0]) == saves_made
    saves, idle = [], []
    for r in reviewers:
        for at, seconds in r.times:
            during_export = any(start <= at <= end for start, end in windows)
            (saves if during_export else idle).append(seconds * 1000)
    p50, p95 = percentile(saves, 50), percentile(saves, 95)
    slower = statistics.mean(during) / statistics.mean(alone) - 1
    print(f"labels saved: {saves_made} saves ({int(history['n'][0])} in the history), "
          f"{len(expected)} labels, {len(failures)} failed saves")  # fmt: skip
    for failure in failures[:5]:
        print(f"    {failure}")
    print(f"every label saved: {'yes' if all_saved else 'NO'}")
    print(
        f"label save with no export ({len(idle)} saves): p50 {percentile(idle, 50):.0f} ms, "
        f"p95 {percentile(idle, 95):.0f} ms"
    )
    print(f"label save during the export ({len(saves)} saves): p50 {p50:.0f} ms, p95 {p95:.0f} ms")
    print(f"reviewers' CPU with no export: {reviewers_cpu * 1000:.0f} ms a second")
    print(f"index writes: {len(WRITES)} for {saves_made} saves")
    lags = [seconds * 1000 for r in reviewers for seconds in r.lags]
    print(f"label on disk and in the index after its save's start: "
          f"p50 {percentile(lags, 50):.0f} ms, p95 {percentile(lags, 95):.0f} ms")  # fmt: skip
    print(
        f"export of {args.rows:,} rows ({args.format}): alone {statistics.mean(alone):.2f} s, "
        f"during the reviewers {statistics.mean(during):.2f} s ({slower:+.1%})"
    )
    # The two figures to compare between runs on a busy machine: ratios within this run.
    print(
        f"ratios: label save p95 during the export / with none "
        f"{p95 / max(percentile(idle, 95), 1e-9):.2f}; export during / alone "
        f"{statistics.mean(during) / statistics.mean(alone):.2f}"
    )
    met = all_saved and p95 < 200 and slower <= 0.10
    print(f"targets (every label saved, p95 < 200 ms, export within 10 %): "
          f"{'met' if met else 'NOT met'}")  # fmt: skip
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
