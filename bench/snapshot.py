"""How the command line reads while the app holds the database: a copy against a rebuild.

Usage::

    .venv/bin/python bench/snapshot.py [--lines 200000] [--labels 2000]

Builds a data folder with one job of N results and some labels, indexed by a store that
stays open (the app), then times, in a child process as the CLI would run: (a) copying the
held database and opening the copy, brought up to date (``core.store.snapshot``), and
(b) building a private index from the job folder and the label file alone.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.scratch import scratch_folder  # noqa: E402
from core.jobs.folder import create_job  # noqa: E402
from core.jobs.output_file import OutputWriter  # noqa: E402
from core.run.outputs import Choice, Completion, success_line  # noqa: E402
from core.schemas import EngineConfig, JobStatus  # noqa: E402
from core.store.db import Store  # noqa: E402
from core.store.review import Label, save_label  # noqa: E402

CHILD = """
import sys, time
from pathlib import Path
from core.store.db import Store
from core.store.snapshot import snapshot_store
home, how = Path(sys.argv[1]), sys.argv[2]
started = time.perf_counter()
if how == "copy":
    store = snapshot_store(home / "studio.duckdb", home / "human")
else:
    store = Store(Path(sys.argv[3]) / "private.duckdb", human_dir=home / "human")
store.ingest_all(home / "jobs")
n = store.query("SELECT (SELECT count(*) FROM results) + (SELECT count(*) FROM reviews) AS n")
print(f"{time.perf_counter() - started:.2f} {int(n['n'][0])}")
store.close()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--labels", type=int, default=2_000)
    args = parser.parse_args()
    home = scratch_folder("snapshot-")
    batch = home / "batch.jsonl"
    with batch.open("w") as out:
        for i in range(args.lines):
            text = f"Ticket {i}: the export fails. " * 3
            body = {"model": "m", "max_tokens": 48, "messages": [{"role": "user", "content": text}]}
            line = {"custom_id": f"id-{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    job = create_job(batch, home / "jobs", EngineConfig(model="/models/bench"))
    answer = Completion(
        60, [Choice("The customer reports that the export fails. " * 2, "stop", 24)]
    )
    with OutputWriter(job.output) as output:
        for start in range(0, args.lines, 1000):
            ids = range(start, min(start + 1000, args.lines))
            output.write(success_line(f"id-{i}", "m", answer) for i in ids)
    job.write_status(JobStatus(state="completed", total=args.lines, done=args.lines))
    app = Store(home / "studio.duckdb")  # held open, as the app holds it
    app.ingest_all(home / "jobs")
    for i in range(args.labels):
        save_label(app, job.job_id, f"id-{i}", "ana", Label("pass" if i % 3 else "fail"))
    size = (home / "studio.duckdb").stat().st_size / 1e6
    print(f"{args.lines:,} results, {args.labels:,} labels; database {size:,.0f} MB (held open)")
    for how in ("copy", "rebuild"):
        private = scratch_folder("snapshot-private-")
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(home), how, str(private)],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
        seconds, rows = done.stdout.split()
        print(f"{how}: {float(seconds):.2f} s to a store answering ({int(rows):,} rows)")
    app.close()


if __name__ == "__main__":
    main()
