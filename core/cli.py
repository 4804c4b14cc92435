"""``python -m core``: the headless command line, for scripts and pipelines.

python -m core check FILE.jsonl [--json]
python -m core run FILE.jsonl -o OUT.jsonl [--model DIR] [--skip-invalid]
python -m core models prepare
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

from core.checks import CheckReport, check_file, scan
from core.config import data_paths, default_model_dir
from core.engine import EngineConfig
from core.jobs import JobFolder, JobStatus, create_job, start_worker
from core.models import ModelError, check_model_folder, prepare_default_model
from core.output_file import read_lines
from core.requests import JobDefaults

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_JOB_FAILED = 3


def _defaults_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job defaults (for fields a body leaves out)")
    group.add_argument("--max-tokens", type=int, default=JobDefaults.max_tokens)
    group.add_argument("--temperature", type=float, default=JobDefaults.temperature)
    group.add_argument("--top-p", type=float, default=JobDefaults.top_p)


def _defaults(args: argparse.Namespace) -> JobDefaults:
    return JobDefaults(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p)


def _print_report(report: CheckReport, limit: int = 50) -> None:
    print(
        f"{report.path}: {report.lines} lines, {report.valid} valid, {report.invalid} invalid, "
        f"{report.warnings} warnings"
    )
    for problem in report.problems[:limit]:
        print(f"  {problem}")
    hidden = len(report.problems) - limit + report.problems_dropped
    if hidden > 0:
        print(f"  ... and {hidden} more (use --json for all)")


def _input_file(path: str) -> Path | None:
    file = Path(path)
    if not file.is_file():
        print(f"error: {file} does not exist or is not a file", file=sys.stderr)
        return None
    return file


def cmd_check(args: argparse.Namespace) -> int:
    file = _input_file(args.file)
    if file is None:
        return EXIT_USAGE
    report = check_file(file, _defaults(args))
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=1))
    else:
        _print_report(report)
    return 0 if report.ok else EXIT_INVALID


def _duplicates(report: CheckReport) -> list[str]:
    return [str(p) for p in report.errors if "repeats line" in p.message]


def cmd_run(args: argparse.Namespace) -> int:
    file = _input_file(args.file)
    if file is None:
        return EXIT_USAGE
    try:
        model = check_model_folder(args.model) if args.model else prepare_default_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    report = check_file(file, _defaults(args))
    if report.lines == 0 or (report.invalid and not args.skip_invalid) or _duplicates(report):
        _print_report(report)
        if _duplicates(report):
            print(
                "refused: repeated custom_ids would make results ambiguous; fix the file",
                file=sys.stderr,
            )
        elif report.lines:
            print(
                "refused: the file has invalid lines; fix them or pass --skip-invalid",
                file=sys.stderr,
            )
        return EXIT_INVALID
    paths = data_paths()
    job = create_job(
        file,
        paths.jobs,
        EngineConfig(model=str(model)),
        _defaults(args),
        skip_invalid=args.skip_invalid,
        chunk_size=args.chunk_size,
    )
    worker = start_worker(job)
    print(f"job {job.job_id} started: worker pid {worker.pid}, folder {job.path}", flush=True)
    status = _follow(job, worker)
    _write_ordered(job, Path(args.output))
    print(
        f"job {job.job_id} {status.state}: {status.succeeded} succeeded, {status.failed} failed; "
        f"output in {args.output}"
    )
    if status.state != "completed":
        print(f"error: {status.error or status.message}", file=sys.stderr)
        return EXIT_JOB_FAILED
    return 0


def _follow(job: JobFolder, worker: subprocess.Popen) -> JobStatus:
    """Shows the worker's progress until it exits."""
    with tqdm(total=0, unit="req", disable=None) as bar:
        while True:
            status = job.read_status()
            bar.total = status.total
            bar.set_postfix_str(status.state)
            bar.update(status.done - bar.n)
            if worker.poll() is not None:
                return job.read_status()
            time.sleep(0.5)


def _write_ordered(job: JobFolder, out: Path) -> None:
    """Writes the job's result lines to ``out`` in the input file's order."""
    lines = {line["custom_id"]: line for line in read_lines(job.output)}
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for checked in scan(job.input):
            line = lines.pop(checked.custom_id or f"line-{checked.line_no}", None)
            if line is not None:
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        for line in lines.values():
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")


def cmd_models_prepare(_args: argparse.Namespace) -> int:
    try:
        folder = prepare_default_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"default model ready: {folder}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="check a batch file line by line")
    check.add_argument("file")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    _defaults_arguments(check)
    check.set_defaults(handler=cmd_check)

    run = commands.add_parser("run", help="run a batch file on the local engine")
    run.add_argument("file")
    run.add_argument("-o", "--output", required=True, help="where to write the output JSONL")
    run.add_argument("--model", help=f"model folder (default: {default_model_dir()})")
    run.add_argument(
        "--skip-invalid",
        action="store_true",
        help="run the valid lines; invalid ones get an error line",
    )
    run.add_argument(
        "--chunk-size", type=int, default=128, help="requests handed to the engine at once"
    )
    _defaults_arguments(run)
    run.set_defaults(handler=cmd_run)

    models = commands.add_parser("models", help="model folders")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = models_commands.add_parser("prepare", help="prepare the built-in default model")
    prepare.set_defaults(handler=cmd_models_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)
