"""``grade``: jobs' results checked against a rules file, for pipelines."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.cli.common import EXIT_INVALID, EXIT_USAGE, input_file, open_store


def _rate(row: Any) -> dict[str, Any]:
    graded = int(row.passed) + int(row.failed)
    return {
        "passed": int(row.passed),
        "failed": int(row.failed),
        "not_graded": int(row.not_graded),
        "contradicted": int(getattr(row, "contradicted", 0)),
        "pass_rate": row.pass_rate if graded else None,
        "low": row.ci_low if graded else None,
        "high": row.ci_high if graded else None,
    }


def _percent(value: Any) -> str:
    return "–" if value is None else f"{value:.1%}"


def cmd_grade(args: argparse.Namespace) -> int:
    """Grades the jobs, saves the rules into each job folder, prints the pass rates."""
    from core.qa.grading import grade_jobs
    from core.qa.rules import RulesError, load_rules
    from core.store.checks import pass_rates

    rules_path = input_file(args.rules)
    if rules_path is None:
        return EXIT_USAGE
    text = rules_path.read_text(encoding="utf-8", errors="replace")
    try:
        rules = load_rules(text)
    except RulesError as exc:
        for problem in exc.problems:
            print(f"error: {rules_path}: {problem}", file=sys.stderr)
        return EXIT_INVALID
    store = open_store(args.jobs, fresh_checks=False)  # it grades them itself
    if store is None:
        return EXIT_USAGE
    try:
        jobs = list(dict.fromkeys(args.jobs))
        grade_jobs(store, jobs, rules, text)
        overall = {row.rule: row for row in pass_rates(store, jobs, "all").itertuples()}
        per_job = pass_rates(store, jobs, "job")
    finally:
        store.close()
    report = []
    for rule in rules.rules:
        entry = {"name": rule.name, "type": rule.type, **_rate(overall[rule.name])}
        entry["jobs"] = {
            row.job: _rate(row) for row in per_job.itertuples() if row.rule == rule.name
        }
        report.append(entry)
    if args.json:
        print(json.dumps({"jobs": jobs, "rules": report}, ensure_ascii=False, indent=1))
        return 0
    print(f"graded {len(jobs)} job(s) with {len(rules.rules)} rule(s); rules saved as rules.yaml")
    heads = f"{'passed':>8} {'failed':>8} {'not graded':>11} {'pass rate':>10}"
    print(f"  {'rule':<24} {heads}  95% CI")
    for entry in report:
        interval = f"{_percent(entry['low'])}–{_percent(entry['high'])}"
        print(
            f"  {entry['name']:<24} {entry['passed']:>8} {entry['failed']:>8} "
            f"{entry['not_graded']:>11} {_percent(entry['pass_rate']):>10}  {interval}"
        )
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    grade = commands.add_parser(
        "grade", help="check jobs' results against a rules file (pass rates per rule)"
    )
    grade.add_argument("jobs", nargs="+", help="job ids")
    grade.add_argument("--rules", required=True, help="the rules file (YAML or JSON)")
    grade.add_argument("--json", action="store_true", help="print the pass rates as JSON")
    grade.set_defaults(handler=cmd_grade)
