"""``experiment run`` / ``grade`` / ``export``: prompts x models x settings over one
dataset, run as one job and graded (docs/experiments.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli.common import EXIT_INVALID, EXIT_JOB_FAILED, EXIT_USAGE, model_map_of


def _problems(problems: list[str]) -> None:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)


def cmd_run(args: argparse.Namespace) -> int:
    from core.cli.jobs import follow, print_refusal, who_runs
    from core.config import default_model_dir
    from core.experiments.config import ExperimentError, read_plan
    from core.experiments.runs import grade, start
    from core.jobs.folder import cancel
    from core.jobs.submit import Refused

    model_map = model_map_of(args.map)
    if model_map is None:
        return EXIT_USAGE
    default = Path(args.model).expanduser() if args.model else default_model_dir()
    try:
        plan = read_plan(Path(args.file), model_map, default)
        state, started = start(plan, Path(args.file), default)
    except ExperimentError as exc:
        _problems(exc.problems)
        return EXIT_INVALID
    except Refused as refused:
        print_refusal(refused)
        return EXIT_INVALID
    job = started.job
    print(state.experiment_id)
    print(f"job {job.job_id} started: {who_runs(job, started.worker)}, "
          f"{len(plan.tests)} tests x {len(plan.cells)} variants", file=sys.stderr)  # fmt: skip
    if args.no_wait:
        return 0
    try:
        status = follow(job, started.worker)
    except KeyboardInterrupt:
        print(cancel(job), file=sys.stderr)
        return EXIT_JOB_FAILED
    grades = grade(state)
    passed = sum(all(o for o in row if o is not None) for row in grades.outcomes.values())
    print(f"job {job.job_id} {status.display_state}: {status.succeeded} answered, "
          f"{status.failed} failed; {passed} of {len(grades.outcomes)} passed every check",
          file=sys.stderr)  # fmt: skip
    return 0 if status.state == "completed" else EXIT_JOB_FAILED


def cmd_grade(args: argparse.Namespace) -> int:
    from core.experiments.config import ExperimentError
    from core.experiments.runs import grade, read_state

    try:
        grades = grade(read_state(args.experiment))
    except ExperimentError as exc:
        _problems(exc.problems)
        return EXIT_USAGE
    passed = sum(all(o for o in row if o is not None) for row in grades.outcomes.values())
    print(f"{args.experiment}: {passed} of {len(grades.outcomes)} answers passed every check")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from core.experiments.config import ExperimentError
    from core.experiments.runs import export
    from core.store.export import ExportError

    fmt = Path(args.output).suffix.lower().lstrip(".")
    if fmt not in ("csv", "parquet", "xlsx"):
        print("error: -o names a .csv, .parquet or .xlsx file", file=sys.stderr)
        return EXIT_USAGE
    try:
        rows = export(args.experiment, Path(args.output), fmt=fmt)
    except ExperimentError as exc:
        _problems(exc.problems)
        return EXIT_USAGE
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{rows} rows written to {args.output}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    group = commands.add_parser(
        "experiment", help="prompts x models x settings over one dataset, graded"
    )
    sub = group.add_subparsers(dest="experiment_command", required=True)
    run = sub.add_parser(
        "run",
        help="run an experiment file (the studio's, or a promptfooconfig.yaml); prints its id",
    )
    run.add_argument("file", help="the experiment's YAML file")
    run.add_argument("--model", help="model folder for names mapped nowhere (default: built-in)")
    run.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="run a provider's model NAME (gpt-4o-mini) on a local model folder; repeatable",
    )
    run.add_argument("--no-wait", action="store_true", help="start the job and return")
    run.set_defaults(handler=cmd_run)
    grade = sub.add_parser("grade", help="grade an experiment's answers again")
    grade.add_argument("experiment", help="the experiment's id (exp_...)")
    grade.set_defaults(handler=cmd_grade)
    export = sub.add_parser(
        "export", help="the matrix as CSV, Parquet or XLSX: one row per test x prompt x provider"
    )
    export.add_argument("experiment", help="the experiment's id (exp_...)")
    export.add_argument(
        "-o", "--output", required=True, help="the .csv, .parquet or .xlsx file to write"
    )
    export.set_defaults(handler=cmd_export)
