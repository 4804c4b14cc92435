"""Sessions side by side: reviewers saving labels while another session exports everything.

    .venv/bin/python bench/sessions.py [--rows 1000000] [--reviewers 8] [--every 1.0]

One store (the UI process's, as every Streamlit session shares it) is filled with synthetic
results (``bench/results_store.py``'s ``fill``). The export of every result (``core``'s
own ``export_results``) is timed alone, then again while ``--reviewers`` threads, one per
simulated session, each save a label every ``--every`` seconds with ``save_label`` (a
person labels every few seconds: 8 reviewers at 1 s are several times a team's pace).
Prints whether every label was saved, the label saves' p50 and p95 with no export running
and during the export, and the export's time alone and during the reviewers; targets:
every label saved, p95 under 200 ms, the export within 10 % of its time alone. It uses the
store's public calls only, so it runs on an older checkout too (before and after).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results_store import fill
from bench.scratch import scratch_folder
from core.store.db import Store
from core.store.export import export_results
from core.store.results import ResultFilter
from core.store.review import Label, save_label

VERDICTS = ("pass", "fail", "unsure")


class Reviewer(threading.Thread):
    """One session's reviewer: saves a label every ``every`` seconds until stopped, and
    keeps what it saved last per item and how long each save took."""

    def __init__(self, store: Store, name: str, items: list[tuple[str, str]], every: float):
        super().__init__(name=name, daemon=True)
        self.store, self.items, self.every = store, items, every
        self.saved: dict[tuple[str, str], str] = {}  # (job_id, custom_id) -> last verdict
        self.times: list[tuple[float, float]] = []  # (started, seconds) per save
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        rng = random.Random(self.name)
        while not self.stop.is_set():
            item, verdict = rng.choice(self.items), rng.choice(VERDICTS)
            started = time.perf_counter()
            try:
                save_label(self.store, *item, self.name, Label(verdict, tags=("bench",)))
            except Exception as exc:  # counted: every label must be saved
                self.failures.append(f"{type(exc).__name__}: {exc}")
            else:
                self.saved[item] = verdict
                self.times.append((started, time.perf_counter() - started))
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
    time.sleep(max(5.0, 5 * args.every))  # saves with no export running, to compare with
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

    # Every label saved: each reviewer's last verdict of each item is what the store holds.
    stored = {
        (j, c, r): v for j, c, r, v in store.query(
            "SELECT job_id, custom_id, reviewer, verdict FROM reviews"
        ).values
    }  # fmt: skip
    expected = {(*item, r.name): v for r in reviewers for item, v in r.saved.items()}
    failures = [f for r in reviewers for f in r.failures]
    all_saved = not failures and stored == expected
    saves, idle = [], []
    for r in reviewers:
        for at, seconds in r.times:
            during_export = any(start <= at <= end for start, end in windows)
            (saves if during_export else idle).append(seconds * 1000)
    p50, p95 = percentile(saves, 50), percentile(saves, 95)
    slower = statistics.mean(during) / statistics.mean(alone) - 1
    print(f"labels saved: {sum(len(r.times) for r in reviewers)} saves, "
          f"{len(expected)} labels, {len(failures)} failed saves")  # fmt: skip
    for failure in failures[:5]:
        print(f"    {failure}")
    print(f"every label saved: {'yes' if all_saved else 'NO'}")
    print(
        f"label save with no export ({len(idle)} saves): p50 {percentile(idle, 50):.0f} ms, "
        f"p95 {percentile(idle, 95):.0f} ms"
    )
    print(f"label save during the export ({len(saves)} saves): p50 {p50:.0f} ms, p95 {p95:.0f} ms")
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
