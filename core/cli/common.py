"""What every command group shares: exit codes, arguments and printing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core.check import CheckReport
from core.config import data_paths
from core.schemas import JobDefaults, problems_of

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_JOB_FAILED = 3
EXIT_WITH_ERRORS = 4  # the job completed, and some of its requests failed
EXIT_NOT_DELIVERED = 5  # the job completed; its output could not be written (results kept)


def defaults_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job defaults (for fields a body leaves out)")
    default = JobDefaults()
    group.add_argument("--max-tokens", type=int, default=default.max_tokens)
    group.add_argument("--temperature", type=float, default=default.temperature)
    group.add_argument("--top-p", type=float, default=default.top_p)


def job_defaults(args: argparse.Namespace) -> JobDefaults | None:
    """The job defaults given on the command line; None (after saying why) when out of range."""
    try:
        return JobDefaults(
            max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p
        )
    except ValidationError as exc:
        for problem in problems_of(exc):
            print(f"error: job default {problem}", file=sys.stderr)
        return None


def print_report(report: CheckReport, limit: int = 50) -> None:
    print(
        f"{report.path}: {report.lines} lines, {report.valid} valid, {report.invalid} invalid, "
        f"{report.warnings} warnings"
    )
    for problem in report.problems[:limit]:
        print(f"  {problem}")
    hidden = len(report.problems) - limit + report.problems_dropped
    if hidden > 0:
        print(f"  ... and {hidden} more (use --json for all)")


def model_folder(path: str | None) -> Path | None:
    """The model folder a command names, checked, or the built-in model (prepared if it
    is not yet); None (after saying why) when it cannot be used."""
    from core.model_folders import ModelError, check_model_folder, prepare_default_model

    try:
        return check_model_folder(path) if path else prepare_default_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def input_file(path: str) -> Path | None:
    file = Path(path)
    if not file.is_file():
        print(f"error: {file} does not exist or is not a file", file=sys.stderr)
        return None
    return file


def model_map_of(pairs: list[str]) -> dict[str, str] | None:
    """The studio's model names (:mod:`core.model_names`) with ``NAME=FOLDER`` arguments
    over them; None (after a message) when one is malformed."""
    from core.model_names import studio_model_map

    mapping = studio_model_map()
    for pair in pairs:
        name, sep, folder = pair.partition("=")
        if not sep or not name or not folder:
            print(f"error: --map {pair!r}: write NAME=FOLDER", file=sys.stderr)
            return None
        mapping[name] = str(Path(folder).expanduser())
    return mapping


def open_store(job_ids: list[str], fresh_checks: bool = True) -> Any:
    """The DuckDB store with every job folder ingested, once all of ``job_ids`` are in it;
    None (after saying why) when a job is unknown. Only the commands that need the store
    open it (export, grade, judge).

    While the app holds the database, the command reads a private copy brought up to date
    from the job folders and the human-work files (``core.store.snapshot``): the same rows,
    and the app is never waited for. A database that cannot be read is set aside and
    rebuilt, and the command says so on stderr.

    Args:
        job_ids: the jobs the command names.
        fresh_checks: grade again, from each job's ``rules.yaml``, the jobs whose outcomes
            are missing or stale (as the pages do), so what a command reads of the checks is
            the same in a private copy, a rebuilt index and the app's.
    """
    from core.store.db import Store, StoreLocked
    from core.store.snapshot import snapshot_store

    paths = data_paths()
    try:
        store = Store(paths.database, human_dir=paths.human)
    except StoreLocked as exc:
        print(f"note: {exc}; reading a private copy of it, brought up to date from the job "
              "folders and label files", file=sys.stderr)  # fmt: skip
        store = snapshot_store(paths.database, paths.human)
    else:
        if store.set_aside is not None:
            print(
                f"note: {paths.database} could not be read ({store.set_aside_reason}); set "
                f"aside as {store.set_aside.name} and rebuilt from the job folders and the "
                "files of labels, preferences and samples",
                file=sys.stderr,
            )
    from core.qa.grading import refresh

    store.ingest_all(paths.jobs)
    if fresh_checks:
        refresh(store, list(store.jobs()["job_id"]))
    for problem in store.human_problems():
        print(f"warning: {paths.human / problem} (line skipped)", file=sys.stderr)
    known = set(store.jobs()["job_id"])
    missing = [j for j in job_ids if j not in known]
    if missing:
        store.close()
        print(f"error: no job {', '.join(missing)} in {paths.jobs}", file=sys.stderr)
        return None
    unreadable = [j for j in job_ids if j in store.unreadable]
    if unreadable:  # its lines are not all in the index: nothing of it is given out short
        store.close()
        for job_id in unreadable:
            print(f"error: job {job_id}: {store.unreadable[job_id]}", file=sys.stderr)
        return None
    return store
