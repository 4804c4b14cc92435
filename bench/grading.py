"""Grades a million synthetic results by five rules in DuckDB and prints how long it takes.

    .venv/bin/python bench/grading.py [--rows 1000000] [--keep DIR]

The rows are bench/results_store.py's (made in SQL: four jobs, two models, three prompt
versions, ~4% failures), with every fifth answer turned into a JSON object and another
fifth into paragraphs. The five rules are those DuckDB evaluates alone: a word count, a
case-insensitive contains, a regex, JSON validity and the refusal detector. Then each rule
alone, what the pages read afterwards (pass rates, a page of one rule's failures, a sample
of them) and, for scale, one rule graded in Python (a JSON schema) on a quarter of the rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results_store import fill, timed
from bench.scratch import scratch_folder
from core.qa.grading import grade
from core.qa.rules import load_rules
from core.store import results as R
from core.store import samples as S
from core.store.checks import pass_rates
from core.store.db import Store

FIVE = """
rules:
  - {name: short, type: length, unit: words, max: 40}
  - {name: mentions_refund, type: contains, values: [refund, boxing], case_sensitive: false}
  - {name: numbered, type: regex, pattern: '^Answer [0-9]+: the'}
  - {name: is_json, type: json}
  - {name: no_refusal, type: refusal}
"""
SCHEMA = """
rules:
  - name: labelled
    type: json_schema
    schema: {type: object, required: [label], properties: {label: {enum: [pos, neg]}}}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--keep", help="build the store in this folder and keep it")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else scratch_folder("bench_grading_")
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(folder / "studio.duckdb")
    start = time.perf_counter()
    job_ids = fill(store, args.rows)
    store.execute(  # JSON answers, and answers of several lines, as models write them
        """UPDATE results SET answer = CASE
               WHEN line_no % 5 = 0 THEN '{"label": "' || ['pos', 'neg', 'meh'][1 + line_no % 3]
                    || '", "n": ' || line_no || '}'
               WHEN line_no % 5 = 1 THEN replace(answer, ' over ', chr(10) || chr(10) || 'Over ')
               ELSE answer END
           WHERE answer IS NOT NULL AND line_no % 5 IN (0, 1)"""
    )
    print(f"filled {args.rows:,} results in {time.perf_counter() - start:.1f} s ({folder})")
    rules = load_rules(FIVE)
    timed(f"grade {args.rows:,} results by 5 rules (into rule_outcomes)", lambda: grade(
        store, job_ids, rules), repeat=3)  # fmt: skip
    for rule in rules.rules:
        one = rules.model_copy(update={"rules": [rule]})
        timed(f"  {rule.name} ({rule.type}) alone", lambda one=one: grade(store, job_ids, one), 1)
    grade(store, job_ids, rules)
    frame = timed("pass rates per rule and job", lambda: pass_rates(store, job_ids, "job"))
    timed("pass rates per rule and prompt version", lambda: pass_rates(store, job_ids, "model"))
    failing = R.ResultFilter(job_ids=job_ids, checks={"short": "failed"})
    timed("count of one rule's failures", lambda: R.count(store, failing))
    timed("page 1 of one rule's failures", lambda: R.page(store, failing))
    definition = S.SampleDefinition(filter=failing, size=100)
    timed("sample of 100 of one rule's failures", lambda: S.draw(store, definition))
    tenth = job_ids[:1] if args.rows >= 400_000 else job_ids
    timed(
        f"grade a JSON schema in Python ({len(tenth)} of {len(job_ids)} jobs)",
        lambda: grade(store, tenth, load_rules(SCHEMA)),
        repeat=1,
    )
    overall = frame.groupby("rule", sort=False)[["passed", "failed", "not_graded"]].sum()
    print(overall.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
