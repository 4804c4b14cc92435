"""``export``: results, errors, samples, labels and tallies from the DuckDB store; and
training data from people's work: fine-tuning files (``sft``, ``dpo``) and a dataset."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.cli.common import EXIT_USAGE, open_store
from core.store import TRAINING_FORMATS as TRAINING


def cmd_export(args: argparse.Namespace) -> int:
    """Writes results (filtered), the error file, a sample with labels, labels, tallies,
    or training data (:data:`core.store.TRAINING_FORMATS`)."""
    from core.store import export

    if args.what in TRAINING:
        return _training(args)
    from core.store.results import ResultFilter

    fmt = args.format or Path(args.output).suffix.lstrip(".") or "csv"
    store = open_store(args.jobs)
    if store is None:
        return EXIT_USAGE
    try:
        if args.what == "results":
            if not args.jobs:
                print("error: name at least one job", file=sys.stderr)
                return EXIT_USAGE
            flt = ResultFilter(
                job_ids=args.jobs,
                statuses=args.status or [],
                finish_reasons=args.finish_reason or [],
                search=args.search or "",
            )
            rows = export.export_results(store, flt, args.output, fmt, args.redact)
        elif args.what == "errors":
            rows = export.export_errors(store, args.jobs, args.output)
        elif args.what == "sample":
            if not args.sample:
                print("error: --sample SAMPLE_ID is required", file=sys.stderr)
                return EXIT_USAGE
            rows = export.export_sample(store, args.sample, args.output, fmt)
        elif args.what == "labels":
            rows = export.export_labels(store, args.output, fmt)
        else:
            rows = export.export_tally(store, args.output, fmt)
    except export.ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    print(f"{rows} rows written to {args.output}")
    return 0


def _training(args: argparse.Namespace) -> int:
    """Training data: it says what it wrote and what it left out, and why."""
    from core.store import export, training

    fmt = TRAINING[args.what]
    if args.format and args.format != fmt:
        print(f"error: --what {args.what} writes {fmt}, not {args.format}", file=sys.stderr)
        return EXIT_USAGE
    if args.what != "dpo" and not args.sample:
        print("error: --sample SAMPLE_ID is required", file=sys.stderr)
        return EXIT_USAGE
    store = open_store(args.jobs)
    if store is None:
        return EXIT_USAGE
    try:
        if args.what == "sft":
            outcome = training.export_sft(store, args.sample, args.output)
        elif args.what == "dpo":
            outcome = training.export_dpo(store, args.output, args.comparison)
        else:
            outcome = training.export_dataset(store, args.sample, args.output)
    except export.ExportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    print(outcome.describe())
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    exp = commands.add_parser(
        "export", help="export results, errors, samples, labels, fine-tuning data"
    )
    exp.add_argument("jobs", nargs="*", help="job ids (results and errors)")
    exp.add_argument("-o", "--output", required=True, help="file to write (dataset: a folder)")
    exp.add_argument(
        "--what",
        choices=["results", "errors", "sample", "labels", "tally", *TRAINING],
        default="results",
        help="what to export (default: results, with their review labels); sft: OpenAI chat "
        "fine-tuning JSONL of a sample's passing items; dpo: OpenAI preference fine-tuning "
        "JSONL from Compare's preferences; dataset: a Parquet folder with a dataset card",
    )
    exp.add_argument(
        "--format", choices=["csv", "parquet", "jsonl", "xlsx"], help="default: from -o suffix"
    )
    exp.add_argument(
        "--redact",
        action="store_true",
        help="results: every text with its e-mail addresses, phone and card numbers, IBANs, "
        "IP addresses and credentials replaced by placeholders such as [EMAIL_1] (phone "
        "numbers without a +country code read as the studio's region, Settings)",
    )
    exp.add_argument("--status", action="append", help="only this status (repeatable)")
    exp.add_argument("--finish-reason", action="append", help="only this finish reason")
    exp.add_argument("--search", help="only results whose prompt or answer has this text")
    exp.add_argument("--sample", help="the sample id (with --what sample, sft, dataset)")
    exp.add_argument("--comparison", help="only this comparison's preferences (--what dpo)")
    exp.set_defaults(handler=cmd_export)
