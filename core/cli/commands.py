"""``python -m core``: the headless command line, for scripts and pipelines.

python -m core check FILE.jsonl [--json] [--model DIR] [--map NAME=DIR] [--valid-out FILE]
python -m core build TABLE.{csv,parquet,xlsx} -o OUT.jsonl --user-template "..." [options]
python -m core run FILE.jsonl -o OUT.jsonl [--model DIR] [--skip-invalid] [--restart]
python -m core resume JOB [--retry] | retry JOB | cancel JOB
python -m core reconcile JOB [--json] [--write-rerun FILE] | verify JOB
python -m core export JOB... -o OUT.{csv,parquet,jsonl,xlsx} [--what ...] [filters]
python -m core models prepare
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from subprocess import Popen

from pydantic import ValidationError
from tqdm import tqdm

from core.check import CheckReport, check_file
from core.config import data_paths, default_model_dir
from core.files import file_sha256
from core.jobs.folder import JobFolder, cancel, find_job
from core.jobs.ledger import (
    read_ledger,
    reconcile,
    shards,
    verify,
    write_combined,
    write_rerun_file,
)
from core.jobs.queue import EngineLock
from core.jobs.submit import Refused, Submission, resubmit, submit, take_up
from core.model_folders import ModelError, check_model_folder, prepare_default_model
from core.run.ray_cluster import ray_settings
from core.schemas import EngineConfig, JobDefaults, JobStatus, RaySettings, problems_of

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_JOB_FAILED = 3
EXIT_WITH_ERRORS = 4  # the job completed, and some of its requests failed


def _defaults_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("job defaults (for fields a body leaves out)")
    default = JobDefaults()
    group.add_argument("--max-tokens", type=int, default=default.max_tokens)
    group.add_argument("--temperature", type=float, default=default.temperature)
    group.add_argument("--top-p", type=float, default=default.top_p)


def _defaults(args: argparse.Namespace) -> JobDefaults | None:
    """The job defaults given on the command line; None (after saying why) when out of range."""
    try:
        return JobDefaults(
            max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p
        )
    except ValidationError as exc:
        for problem in problems_of(exc):
            print(f"error: job default {problem}", file=sys.stderr)
        return None


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


def _model_map(pairs: list[str]) -> dict[str, str] | None:
    """``NAME=FOLDER`` arguments as a dict; None (after a message) when one is malformed."""
    mapping = {}
    for pair in pairs:
        name, sep, folder = pair.partition("=")
        if not sep or not name or not folder:
            print(f"error: --map {pair!r}: write NAME=FOLDER", file=sys.stderr)
            return None
        mapping[name] = str(Path(folder).expanduser())
    return mapping


def cmd_check(args: argparse.Namespace) -> int:
    from core.check import summary_lines
    from core.plan.estimate import estimate, estimate_lines
    from core.plan.pricing import load_prices

    file = _input_file(args.file)
    model_map = _model_map(args.map)
    defaults = _defaults(args)
    if file is None or model_map is None or defaults is None:
        return EXIT_USAGE
    model = None
    if not args.no_tokens:
        model = Path(args.model).expanduser() if args.model else default_model_dir()
        if not (model / "tokenizer.json").is_file():
            if args.model:
                print(f"error: {model} has no tokenizer.json", file=sys.stderr)
                return EXIT_USAGE
            model = None  # the built-in model is not prepared: check the structure only
    report = check_file(
        file, defaults, model_folder=model, model_map=model_map, valid_out=args.valid_out
    )
    prices = load_prices()
    if args.budget is not None:
        prices.budget = args.budget
    result = estimate(report, prices)
    data = report.to_dict()
    data["estimate"] = result.to_dict()
    if args.report:
        Path(args.report).write_text(json.dumps(data, ensure_ascii=False, indent=1), "utf-8")
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=1))
        return 0 if report.ok else EXIT_INVALID
    _print_report(report)
    print("summary:")
    for line in summary_lines(report):
        print(f"  {line}")
    if model is None:
        print("  prompt tokens not counted (no model folder with a tokenizer; see --model)")
    print("estimate:")
    for line in estimate_lines(result):
        print(f"  {line}")
    if args.valid_out:
        print(f"valid lines written to {args.valid_out} ({report.valid})")
    return 0 if report.ok else EXIT_INVALID


def cmd_build(args: argparse.Namespace) -> int:
    from core.plan.builder import BuildError, BuildSpec, build_file, preview, read_table

    table_file = _input_file(args.table)
    if table_file is None:
        return EXIT_USAGE
    user_template = args.user_template
    if args.user_template_file:
        user_template = Path(args.user_template_file).read_text(encoding="utf-8")
    if not user_template:
        print("error: give --user-template or --user-template-file", file=sys.stderr)
        return EXIT_USAGE
    params = {"max_tokens": args.max_tokens, "temperature": args.temperature, "top_p": args.top_p}
    spec = BuildSpec(
        user_template=user_template,
        system_prompt=args.system or "",
        id_column=args.id_column,
        task=args.task,
        model=args.model_name,
        prompt_version=args.prompt_version,
        job_id=args.job_id or "",
        params=params,
        skip_empty=not args.keep_empty,
    )
    try:
        table = read_table(table_file)
        if args.preview:
            result = preview(table, spec, args.preview)
            for line in result.lines:
                print(json.dumps(line, ensure_ascii=False, indent=1))
        else:
            result = build_file(table, spec, args.output)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for problem in result.problems[:50]:
        print(f"  {problem}")
    if len(result.problems) > 50:
        print(f"  ... and {len(result.problems) - 50} more")
    if not args.preview:
        print(f"{result.written} of {result.rows} rows written to {args.output}")
    return 0 if result.written else EXIT_INVALID


def _print_refusal(refused: Refused) -> None:
    """Prints why a job was not started; a file's problems first, then every reason."""
    if refused.report is not None and refused.report.problems:
        _print_report(refused.report)
    for problem in refused.problems:
        print(f"refused: {problem}", file=sys.stderr)


def _ray(args: argparse.Namespace) -> tuple[RaySettings | None, bool]:
    """The Ray settings given (None: this machine), and whether they are valid."""
    try:
        settings = ray_settings(
            args.ray, args.replicas, args.replica_gpus, args.replica_cpus, args.replica_resources
        )
    except ValidationError as exc:
        for problem in problems_of(exc):
            print(f"error: Ray setting {problem}", file=sys.stderr)
        return None, False
    return settings, True


def cmd_run(args: argparse.Namespace) -> int:
    # Everything given is checked before the model is prepared or any job is made.
    file = _input_file(args.file)
    model_map = _model_map(args.map)
    defaults = _defaults(args)
    ray, ray_ok = _ray(args)
    if file is None or model_map is None or defaults is None or not ray_ok:
        return EXIT_USAGE
    try:
        model = check_model_folder(args.model) if args.model else prepare_default_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    output = Path(args.output).resolve()
    job = None if args.restart else find_job(data_paths().jobs, file_sha256(file), str(output))
    try:
        if job is not None:
            print(f"continuing job {job.job_id}: requests with a result are not run again")
            started = resubmit(job)
        else:
            submission = Submission(
                engine=EngineConfig(model=str(model)),
                defaults=defaults,
                skip_invalid=args.skip_invalid,
                chunk_size=args.chunk_size,
                shard_size=args.shard_size,
                model_map=model_map,
                output_path=str(output),
                ray=ray,
            )
            started = submit(file, submission)
    except Refused as refused:
        _print_refusal(refused)
        return EXIT_INVALID if refused.report is not None and refused.report.errors else EXIT_USAGE
    return _follow_to_end(started.job, output, started.worker)


def _follow_to_end(job: JobFolder, output: Path | None, worker: Popen) -> int:
    """Follows a started job to its end, writes the combined output file, and returns the
    exit code that says how it ended."""
    print(f"job {job.job_id} started: worker pid {worker.pid}, folder {job.path}", flush=True)
    try:
        status = _follow(job, worker)
    except KeyboardInterrupt:
        print(cancel(job), file=sys.stderr)
        worker.wait()
        status = job.read_status()
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_combined(job, output)
    print(
        f"job {job.job_id} {status.display_state}: {status.succeeded} succeeded, "
        f"{status.failed} failed" + (f"; output in {output}" if output else "")
    )
    if status.state != "completed":
        print(f"error: {status.error or status.message}", file=sys.stderr)
        return EXIT_JOB_FAILED
    return EXIT_WITH_ERRORS if status.failed else 0


def _follow(job: JobFolder, worker: Popen) -> JobStatus:
    """Shows the job's progress until it ends (it may first wait for another job)."""
    with tqdm(total=0, unit="req", disable=None) as bar:
        while True:
            status = job.read_status()
            bar.total = status.total
            bar.set_postfix_str(status.state)
            bar.update(status.done - bar.n)
            if status.is_final or status.interrupted:
                return status
            stranded = worker.poll() is not None and status.state == "queued"
            if stranded and EngineLock(job.path.parent).holder() is None:  # nobody took it
                worker = take_up(job)
            time.sleep(0.5)


def _job(job_id: str) -> JobFolder | None:
    job = JobFolder(data_paths().jobs / Path(job_id).name)
    if not job.spec_file.is_file():
        print(f"error: no job {job_id!r} in {data_paths().jobs}", file=sys.stderr)
        return None
    return job


def _output_of(job: JobFolder) -> Path | None:
    spec = job.read_spec()
    return Path(spec.output_path) if spec.output_path else None


def cmd_resume(args: argparse.Namespace) -> int:
    job = _job(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        started = resubmit(job, retry=args.retry, shard=getattr(args, "shard", None))
    except Refused as refused:
        _print_refusal(refused)
        return EXIT_INVALID if refused.report is not None and refused.report.errors else EXIT_USAGE
    return _follow_to_end(job, _output_of(job), started.worker)


def cmd_cancel(args: argparse.Namespace) -> int:
    job = _job(args.job)
    if job is None:
        return EXIT_USAGE
    print(cancel(job))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    job = _job(args.job)
    if job is None:
        return EXIT_USAGE
    report = reconcile(job)
    if args.write_rerun:
        ids = read_ledger(job).retryable()
        count = write_rerun_file(job, ids, Path(args.write_rerun))
        print(f"wrote {count} failed/expired/missing requests to {args.write_rerun}")
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=1))
        return 0 if report.complete else EXIT_INVALID
    print(
        f"job {job.job_id}: {report.requests} requests, {report.succeeded} succeeded, "
        f"{report.failed} failed, {len(report.missing)} without a result "
        f"({report.success_rate:.1%} success)"
    )
    for label, ids in (
        ("duplicates", report.duplicates),
        ("unexpected", report.unexpected),
        ("missing", report.missing),
    ):
        if ids:
            print(f"  {label}: {len(ids)}, e.g. {', '.join(ids[:5])}")
    for failure, count in report.failures_by_class.items():
        print(f"  {count:6d} x {failure}")
    parts = shards(read_ledger(job), job.read_spec().shard_size)
    if len(parts) > 1:
        for part in parts:
            print(
                f"  shard {part.number} ({part.first} .. {part.last}): {part.state}, "
                f"{part.succeeded} succeeded, {part.failed} failed, {part.missing} without a result"
            )
    return 0 if report.complete else EXIT_INVALID


def cmd_verify(args: argparse.Namespace) -> int:
    job = _job(args.job)
    if job is None:
        return EXIT_USAGE
    result = verify(job)
    if result.ok:
        print(
            f"job {job.job_id}: verified, {result.lines_checked} result lines, hash chains "
            "intact, one result per request"
        )
        return 0
    for problem in result.problems:
        print(f"job {job.job_id}: {problem}")
    return EXIT_INVALID


def cmd_watch(args: argparse.Namespace) -> int:
    """Watches the inbox until interrupted: dropped files become queued jobs or are refused."""
    from core.jobs.inbox import watch_inbox

    paths = data_paths()
    observer = watch_inbox(paths, str(check_model_folder(args.model)) if args.model else None)
    print(
        f"watching {paths.inbox} (valid files become queued jobs, invalid ones go to "
        f"{paths.inbox / 'rejected'} with a report); Ctrl-C stops"
    )
    try:
        while observer.is_alive():
            observer.join(1)
    except KeyboardInterrupt:
        observer.stop()
    return 0


def cmd_models_prepare(_args: argparse.Namespace) -> int:
    try:
        folder = prepare_default_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"default model ready: {folder}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Writes results (filtered), the error file, a sample with labels, labels or tallies."""
    import duckdb  # the store is only opened here: other commands never touch DuckDB

    from core.store.db import Store, export
    from core.store.results import ResultFilter

    fmt = args.format or Path(args.output).suffix.lstrip(".") or "csv"
    paths = data_paths()
    try:
        store = Store(paths.database)
    except duckdb.IOException:
        print(
            "error: the database is open in the app; export from its pages, or stop the app",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        store.ingest_all(paths.jobs)
        known = set(store.jobs()["job_id"])
        missing = [j for j in args.jobs if j not in known]
        if missing:
            print(f"error: no job {', '.join(missing)} in {paths.jobs}", file=sys.stderr)
            return EXIT_USAGE
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
            rows = export.export_results(store, flt, args.output, fmt)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="check a batch file line by line")
    check.add_argument("file")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--model",
        help=f"model folder whose tokenizer counts tokens (default: {default_model_dir()})",
    )
    check.add_argument("--no-tokens", action="store_true", help="check the structure only")
    check.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="run body.model NAME on a local model folder (repeatable; default: --model)",
    )
    check.add_argument("--valid-out", metavar="FILE", help="write the valid lines to FILE")
    check.add_argument("--report", metavar="FILE", help="write the JSON report to FILE")
    check.add_argument("--budget", type=float, help="budget for this run (price table currency)")
    _defaults_arguments(check)
    check.set_defaults(handler=cmd_check)

    build = commands.add_parser(
        "build", help="build a batch file from a CSV, Parquet or Excel table"
    )
    build.add_argument("table")
    build.add_argument("-o", "--output", help="the batch JSONL to write")
    build.add_argument("--user-template", default="", help="user prompt, Jinja2: {{ column }}")
    build.add_argument("--user-template-file", help="read the user prompt template from a file")
    build.add_argument("--system", help="system prompt (may use {{ column }} too)")
    build.add_argument("--id-column", help="column with each row's id (default: row numbers)")
    build.add_argument("--task", default="task", help="task name; custom_id is TASK:ID")
    build.add_argument("--model-name", default="gpt-4o-mini", help="body.model of each line")
    build.add_argument("--prompt-version", default="v1")
    build.add_argument("--job-id", help="job_id put into each body's metadata")
    build.add_argument("--max-tokens", type=int)
    build.add_argument("--temperature", type=float)
    build.add_argument("--top-p", type=float)
    build.add_argument(
        "--keep-empty",
        action="store_true",
        help="render empty cells as '' instead of leaving rows out",
    )
    build.add_argument(
        "--preview", type=int, metavar="N", help="print the first N lines; write nothing"
    )
    build.set_defaults(handler=cmd_build)

    run = commands.add_parser("run", help="run a batch file on the local engine")
    run.add_argument("file")
    run.add_argument("-o", "--output", required=True, help="where to write the output JSONL")
    run.add_argument("--model", help=f"model folder (default: {default_model_dir()})")
    run.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="run body.model NAME on another model folder (repeatable; an A/B test in one job)",
    )
    run.add_argument(
        "--restart",
        action="store_true",
        help="start a new job instead of continuing the last one for this file and output",
    )
    run.add_argument(
        "--shard-size", type=int, default=10_000, help="requests per shard (a unit of retry)"
    )
    run.add_argument(
        "--skip-invalid",
        action="store_true",
        help="run the valid lines; invalid ones get an error line",
    )
    run.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="requests inside the engine at once (default: its max concurrent sequences)",
    )
    ray_group = run.add_argument_group("Ray cluster (needs requirements-ray.txt)")
    ray_group.add_argument(
        "--ray", metavar="ADDRESS", help="run on a Ray cluster: local, auto, HOST:6379, ray://..."
    )
    ray_group.add_argument("--replicas", type=int, default=1, help="engine replicas")
    ray_group.add_argument(
        "--replica-gpus", type=int, default=0, help="GPUs per replica (tensor parallel size)"
    )
    ray_group.add_argument("--replica-cpus", type=float, default=1, help="CPUs per replica")
    ray_group.add_argument(
        "--replica-resources",
        type=json.loads,
        default={},
        metavar="JSON",
        help="custom Ray resources per replica, e.g. '{\"slot\": 1}'",
    )
    _defaults_arguments(run)
    run.set_defaults(handler=cmd_run)

    resume = commands.add_parser("resume", help="resume an interrupted or cancelled job")
    resume.add_argument("job", help="job id")
    resume.add_argument(
        "--retry", action="store_true", help="also rerun failed requests (never invalid input)"
    )
    resume.set_defaults(handler=cmd_resume)

    retry = commands.add_parser("retry", help="rerun a job's failed, expired and missing requests")
    retry.add_argument("job", help="job id")
    retry.add_argument("--shard", type=int, help="only this shard (0-based; see reconcile)")
    retry.set_defaults(handler=cmd_resume, retry=True)

    cancel_cmd = commands.add_parser("cancel", help="stop a running job; its results stay")
    cancel_cmd.add_argument("job", help="job id")
    cancel_cmd.set_defaults(handler=cmd_cancel)

    rec = commands.add_parser("reconcile", help="compare a job's input and result lines")
    rec.add_argument("job", help="job id")
    rec.add_argument("--json", action="store_true", help="print the report as JSON")
    rec.add_argument(
        "--write-rerun",
        metavar="FILE",
        help="write the failed/expired/missing requests as a new batch file",
    )
    rec.set_defaults(handler=cmd_reconcile)

    ver = commands.add_parser("verify", help="prove a job's results untampered and complete")
    ver.add_argument("job", help="job id")
    ver.set_defaults(handler=cmd_verify)

    exp = commands.add_parser("export", help="export results, errors, samples, labels")
    exp.add_argument("jobs", nargs="*", help="job ids (results and errors)")
    exp.add_argument("-o", "--output", required=True, help="file to write")
    exp.add_argument(
        "--what",
        choices=["results", "errors", "sample", "labels", "tally"],
        default="results",
        help="what to export (default: results, with their review labels)",
    )
    exp.add_argument(
        "--format", choices=["csv", "parquet", "jsonl", "xlsx"], help="default: from -o suffix"
    )
    exp.add_argument("--status", action="append", help="only this status (repeatable)")
    exp.add_argument("--finish-reason", action="append", help="only this finish reason")
    exp.add_argument("--search", help="only results whose prompt or answer has this text")
    exp.add_argument("--sample", help="the sample id (with --what sample)")
    exp.set_defaults(handler=cmd_export)

    watch = commands.add_parser("watch", help="turn files dropped into the inbox into jobs")
    watch.add_argument("--model", help="model folder for inbox jobs (default: built-in)")
    watch.set_defaults(handler=cmd_watch)

    models = commands.add_parser("models", help="model folders")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = models_commands.add_parser("prepare", help="prepare the built-in default model")
    prepare.set_defaults(handler=cmd_models_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)
