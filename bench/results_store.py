"""Fills a temporary store with synthetic results and prints how long the result queries take.

    .venv/bin/python bench/results_store.py [--rows 1000000] [--keep DIR]

The rows are made in SQL (no job folders, no engine): four jobs, two models, three prompt
versions, about 4% failures and 10% truncations, metadata with a label and a topic.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.scratch import scratch_folder
from core.store import export as E
from core.store import results as R
from core.store import samples as S
from core.store.db import Store
from core.store.schema import SEARCH_TEXT_SQL

JOBS = 4
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing"


def fill(store: Store, rows: int) -> list[str]:
    """Inserts ``rows`` synthetic results spread over four jobs; returns the job ids."""
    job_ids = [f"job_bench_{i}" for i in range(JOBS)]
    words = WORDS.split()
    per_job = -(-rows // JOBS)
    store.execute(
        f"""
        INSERT INTO jobs (job_id, created_at, source, model, folder, state, total)
        SELECT 'job_bench_' || i, TIMESTAMPTZ '2026-11-01 09:00:00+00' + i * INTERVAL 1 DAY,
               'bench.jsonl', CASE WHEN i % 2 = 0 THEN 'model-small' ELSE 'model-large' END,
               '/nonexistent', 'completed', {per_job}
        FROM range({JOBS}) t(i)
        """,
    )
    word_list = "[" + ", ".join(f"'{w}'" for w in words) + "]"  # constant, not user input
    store.execute(
        f"""
        CREATE TABLE bench_rows AS
        SELECT n, 'job_bench_' || (n % {JOBS}) AS job_id, 'req-' || n AS custom_id,
               n // {JOBS} + 1 AS line_no,
               'Question ' || n || ': ' || array_to_string(list_transform(range(5 + n % 40),
                   x -> {word_list}[1 + (x * 7 + n) % {len(words)}]), ' ') AS prompt,
               'Answer ' || n || ': ' || array_to_string(list_transform(range(10 + n % 60),
                   x -> {word_list}[1 + (x * 3 + n) % {len(words)}]), ' ') AS answer,
               n % 25 = 7 AS failed,
               CASE WHEN n % 10 = 3 THEN 'length' ELSE 'stop' END AS finish_reason,
               ['positive', 'negative', 'neutral'][1 + n % 3] AS label,
               'v' || (1 + n % 3) AS prompt_version
        FROM range({rows}) t(n)
        """,
    )
    store.execute(
        """
        INSERT INTO requests BY NAME
        SELECT job_id, custom_id, line_no, 'gpt-4o-mini' AS model, prompt,
               to_json([{'role': 'user', 'content': prompt}]) AS messages,
               to_json({'label': label, 'topic': 'topic-' || (n % 17),
                        'prompt_version': prompt_version}) AS metadata,
               prompt_version, to_json({'model': 'gpt-4o-mini', 'max_tokens': 64}) AS params
        FROM bench_rows
        """,
    )
    store.execute(
        f"""
        INSERT INTO results BY NAME
        SELECT job_id, custom_id,
               CASE WHEN failed THEN 'failed' ELSE 'succeeded' END AS status,
               CASE WHEN failed THEN 400 ELSE 200 END AS status_code,
               CASE WHEN failed THEN NULL ELSE answer END AS answer,
               CASE WHEN failed THEN NULL ELSE finish_reason END AS finish_reason,
               CASE WHEN failed THEN NULL ELSE 10 + n % 200 END AS prompt_tokens,
               CASE WHEN failed THEN NULL ELSE 5 + n % 64 END AS completion_tokens,
               CASE WHEN failed THEN 'engine_rejected' END AS error_code,
               CASE WHEN failed THEN 'prompt too long' END AS error_message,
               to_json({{'id': 'batch_req_' || n, 'custom_id': custom_id,
                        'response': {{'status_code': 200, 'request_id': 'req_' || n,
                        'body': {{'object': 'chat.completion', 'choices': [{{'index': 0,
                        'message': {{'role': 'assistant', 'content': answer}},
                        'finish_reason': finish_reason}}]}}}}, 'error': NULL}}) AS raw,
               CASE WHEN n % {JOBS} % 2 = 0 THEN 'model-small' ELSE 'model-large' END AS model,
               TIMESTAMPTZ '2026-11-01 09:00:00+00' + (n % {JOBS}) * INTERVAL 1 DAY
                   + (n // {JOBS} // 64) * INTERVAL 2 SECOND AS created_at,
               line_no, prompt, prompt_version,
               to_json({{'label': label, 'topic': 'topic-' || (n % 17),
                        'prompt_version': prompt_version}}) AS metadata
        FROM bench_rows
        """,
    )
    search_text = SEARCH_TEXT_SQL.format(prompt_lower="lower(prompt)", answer="answer")
    store.execute(f"UPDATE results SET search_text = {search_text}")  # as ingest does
    store.execute("DROP TABLE bench_rows")
    return job_ids


def timed(label: str, fn: Callable[[], Any], repeat: int = 3) -> Any:
    """Runs ``fn`` ``repeat`` times and prints the best and the worst time in ms."""
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        times.append((time.perf_counter() - start) * 1000)
    print(f"{label:<58} best {min(times):8.1f} ms   worst {max(times):8.1f} ms", flush=True)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", help="build the store in this folder and keep it")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else scratch_folder("bench_store_")
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(folder / "studio.duckdb")
    start = time.perf_counter()
    job_ids = fill(store, args.rows)
    print(f"filled {args.rows:,} results in {time.perf_counter() - start:.1f} s ({folder})")
    run(store, job_ids, folder)
    return 0


def page_and_total(store: Store, f: R.ResultFilter, size: int = 50) -> R.Total:
    """What the Results page waits for: page 1, then its total (as cheap as the page allows)."""
    rows = R.page(store, f, limit=size)
    return R.total(store, f, offset=0, limit=size, shown=len(rows))


def run(store: Store, job_ids: list[str], folder: Path) -> None:
    """Times the queries the pages and the CLI make."""
    every = R.ResultFilter(job_ids=job_ids)
    one = R.ResultFilter(job_ids=job_ids[:1])
    timed("count, all jobs", lambda: R.count(store, every))
    timed("page 1 (50 rows), all jobs, input order", lambda: R.page(store, every))
    timed("page 10,000, all jobs", lambda: R.page(store, every, offset=499_950))
    timed("page 1, one job", lambda: R.page(store, one))
    timed(
        "page 1 sorted by completion_tokens desc",
        lambda: R.page(store, every, sort="completion_tokens", descending=True),
    )
    timed("page 1 sorted by metadata.label", lambda: R.page(store, every, sort="metadata.label"))
    failed = R.ResultFilter(job_ids=job_ids, statuses=["failed"])
    timed("filter status=failed: count", lambda: R.count(store, failed))
    timed("filter status=failed: page 1", lambda: R.page(store, failed))
    meta = R.ResultFilter(
        job_ids=job_ids,
        metadata={"label": "negative"},
        finish_reasons=["length"],
        completion_tokens=(20, 40),
    )
    timed("filter metadata+finish+tokens: count", lambda: R.count(store, meta))
    timed("filter metadata+finish+tokens: page 1", lambda: R.page(store, meta))
    # A search's "count" is what the page asks for after reading page 1 (R.total: none when
    # the page is not full, else up to R.SEARCH_COUNT_CAP); "exact count" is Count all.
    for label, f in [
        ("search common word, both fields", R.ResultFilter(job_ids=job_ids, search="Wizards")),
        (
            "search rare text (111 matches), both",
            R.ResultFilter(job_ids=job_ids, search="question 1234"),
        ),
        (
            "search absent text, both fields",
            R.ResultFilter(job_ids=job_ids, search="zebra crossing"),
        ),
        (
            "search absent text, answers",
            R.ResultFilter(job_ids=job_ids, search="zebra", search_in="answer"),
        ),
        (
            "search absent text, both, match case",
            R.ResultFilter(job_ids=job_ids, search="zebra", match_case=True),
        ),
    ]:
        shown = len(timed(f"{label}: page 1", lambda f=f: R.page(store, f)))
        total = timed(
            f"{label}: count",
            lambda f=f, n=shown: R.total(store, f, offset=0, limit=50, shown=n),
        )
        print(f"    shows {total} results")
        timed(f"{label}: page 1 + count", lambda f=f: page_and_total(store, f))
        timed(f"{label}: exact count", lambda f=f: R.count(store, f), repeat=1)
    timed("facets (filter choices), all jobs", lambda: R.facets(store, job_ids), repeat=1)
    for method, strata in [
        ("random", None),
        ("stratified", "metadata:label"),
        ("stratified", "prompt_length"),
        ("failures_first", None),
    ]:
        d = S.SampleDefinition(filter=every, method=method, size=200, seed=1, stratify_by=strata)
        timed(f"sample 200, {method} {strata or ''}", lambda d=d: S.draw(store, d), repeat=1)
    for fmt in ("csv", "parquet", "jsonl"):
        target = folder / f"export.{fmt}"
        timed(
            f"export 1M results to {fmt}",
            lambda t=target, f=fmt: E.export_results(store, every, t, f),
            repeat=1,
        )
        print(f"    {target.stat().st_size / 1e6:,.0f} MB")
    errors = folder / "errors.jsonl"
    timed("export the error file", lambda: E.export_errors(store, job_ids, errors), repeat=1)


if __name__ == "__main__":
    raise SystemExit(main())
