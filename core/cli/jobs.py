"""Jobs: ``run``, ``resume``, ``retry``, ``cancel``, ``reconcile``, ``verify``, ``watch``, and
``jobs list`` / ``jobs rename``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from subprocess import Popen

from pydantic import ValidationError

from core.cli.common import (
    EXIT_INVALID,
    EXIT_JOB_FAILED,
    EXIT_NOT_DELIVERED,
    EXIT_USAGE,
    EXIT_WITH_ERRORS,
    defaults_arguments,
    input_file,
    job_defaults,
    model_folder,
    model_map_of,
    print_report,
)
from core.config import data_paths, default_embedding_model_dir, default_model_dir
from core.files import file_sha256
from core.jobs.delivery import deliver
from core.jobs.folder import JobFolder, JobUnreadable, cancel, find_job, list_jobs
from core.jobs.ledger import (
    read_ledger,
    reconcile,
    shards,
    verify,
    write_rerun_file,
)
from core.jobs.names import distinct_name, rename_job
from core.jobs.output_file import CorruptLine
from core.jobs.queue import EngineLock
from core.jobs.submit import Refused, Submission, resubmit, submit, take_up
from core.jobs.uploads import fetch_upload
from core.model_folders import check_model_folder
from core.schemas import (
    NAME_MAX,
    EngineConfig,
    JobState,
    JobStatus,
    RaySettings,
    check_name,
    problems_of,
)
from core.storage.s3 import S3Location, StorageError, is_s3

# How often `core run` reads the job's status: the end of a job is seen within this much.
FOLLOW_SECONDS = 0.2


def print_refusal(refused: Refused) -> None:
    """Prints why a job was not started; a file's problems first, then every reason."""
    if refused.report is not None and refused.report.problems:
        print_report(refused.report)
    for problem in refused.problems:
        print(f"refused: {problem}", file=sys.stderr)


def _ray(args: argparse.Namespace) -> tuple[RaySettings | None, bool]:
    """The Ray settings given (None: this machine), and whether they are valid."""
    # Here: the Ray module imports the engine's (numpy, jsonschema), which core check lacks.
    from core.run.ray_cluster import ray_settings

    try:
        settings = ray_settings(
            args.ray, args.replicas, args.replica_gpus, args.replica_cpus, args.replica_resources
        )
    except ValidationError as exc:
        for problem in problems_of(exc):
            print(f"error: Ray setting {problem}", file=sys.stderr)
        return None, False
    return settings, True


def _fetched(source: str) -> Path | None:
    """The input file: a local path, or an object (s3://...) copied into the uploads folder
    (streamed); None (after saying why) when it cannot be read."""
    if not is_s3(source):
        return input_file(source)
    try:
        return fetch_upload(data_paths().uploads, source)
    except StorageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def _target(output: str) -> str | None:
    """Where the results go: an object URI as given, or a local path made absolute (so
    the same run finds its job again); None (after saying why) when malformed."""
    if not is_s3(output):
        return str(Path(output).resolve())
    try:
        return S3Location.parse(output).uri
    except ValueError as exc:
        print(f"error: -o {exc}", file=sys.stderr)
        return None


def cmd_run(args: argparse.Namespace) -> int:
    # Everything given is checked before the model is prepared or any job is made.
    output = _target(args.output)
    model_map = model_map_of(args.map)
    defaults = job_defaults(args)
    ray, ray_ok = _ray(args)
    if output is None or model_map is None or defaults is None or not ray_ok:
        return EXIT_USAGE
    try:
        if args.name is not None:
            check_name(args.name)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    model = model_folder(args.model)
    if model is None:
        return EXIT_USAGE
    file = _fetched(args.file)
    if file is None:
        return EXIT_USAGE
    try:
        job = None if args.restart else find_job(data_paths().jobs, file_sha256(file), output)
        if job is not None:
            print(f"continuing job {job.job_id}: requests with a result are not run again")
            if args.name is not None:  # a name given now wins over the one it was made with
                name = distinct_name(job.path.parent, check_name(args.name), but=job.job_id)
                job.rename(name)
            started = resubmit(job)
        else:
            submission = Submission(
                engine=EngineConfig(model=str(model)),
                defaults=defaults,
                skip_invalid=args.skip_invalid,
                chunk_size=args.chunk_size,
                shard_size=args.shard_size,
                model_map=model_map,
                output_path=output,
                ray=ray,
                name=args.name,
                embedding_model=args.embedding_model,
                source=args.file if is_s3(args.file) else None,
                reuse=args.reuse,
                run_windows=args.windows,
                keep_redactions=args.keep_redactions,
            )
            started = submit(file, submission)
            for note in started.notes:  # when it runs; a completion window it cannot meet
                print(note, file=sys.stderr)
    except Refused as refused:
        print_refusal(refused)
        return EXIT_INVALID if refused.report is not None and refused.report.errors else EXIT_USAGE
    finally:
        if is_s3(args.file):
            file.unlink(missing_ok=True)  # the job folder holds its own copy
    return _follow_to_end(started.job, output, started.worker)


def _follow_to_end(job: JobFolder, output: str | None, worker: Popen | None) -> int:
    """Follows a started job to its end, delivers its results to ``output``, and returns
    the exit code that says how it ended."""
    print(f"job {job.job_id} started: {who_runs(job, worker)}, folder {job.path}", flush=True)
    try:
        status = follow(job, worker)
    except KeyboardInterrupt:
        print(cancel(job), file=sys.stderr)
        try:
            _wait_final(job)
        except KeyboardInterrupt:  # a second Ctrl-C: stop at once
            print(cancel(job, now=True), file=sys.stderr)
            _wait_final(job)
        status = job.read_status()
    delivery_error = _delivered(job, output, status)
    print(
        f"job {job.job_id} {status.display_state}: {status.succeeded} succeeded, "
        f"{status.failed} failed" + (f"; output in {output}" if output else "")
    )
    if status.reused:  # docs/reuse.md
        from core.run.progress import reused_text  # here: it imports psutil, core check does not

        print(reused_text(status))
    if status.state != "completed":
        print(f"error: {status.error or status.message}", file=sys.stderr)
        return EXIT_JOB_FAILED
    if delivery_error:
        print(f"error: {delivery_error}", file=sys.stderr)
        return EXIT_NOT_DELIVERED
    return EXIT_WITH_ERRORS if status.failed else 0


def _delivered(job: JobFolder, output: str | None, status: JobStatus) -> str | None:
    """Delivers the results to ``output`` (and the error file beside it); None when they
    are there, else why not. An object output is delivered by the worker as the job ends
    (:mod:`core.run.status_keeper`): it is done here only when no worker did (one killed)."""
    if output is None:
        return None
    if is_s3(output) and (status.delivered_to or status.delivery_error):
        return status.delivery_error
    try:
        deliver(job, output)
    except StorageError as exc:
        return (
            f"{exc}. The results stay in the job folder {job.path}; "
            f"`python -m core resume {job.job_id}` writes them again"
        )
    return None


def who_runs(job: JobFolder, worker: Popen | None) -> str:
    """Which worker runs a job just started: its own, or the one holding the engine."""
    if worker is not None:
        return f"worker pid {worker.pid}"
    status = job.read_status()
    if status.state == JobState.AWAITING_APPROVAL:  # waits here until a person decides
        return f"{status.message}; it runs once approved (python -m core approve {job.job_id})"
    holder = EngineLock(job.path.parent).holder()
    return f"the engine's worker (pid {holder}) runs it" if holder else "queued"


def _wait_final(job: JobFolder) -> None:
    """Waits until a cancelled job has ended (its worker may run other jobs after it)."""
    while True:
        status = job.read_status()
        if status.is_final or status.interrupted:
            return
        time.sleep(FOLLOW_SECONDS)


def follow(job: JobFolder, worker: Popen | None) -> JobStatus:
    """Shows the job's progress until it ends (it may first wait for another job)."""
    from tqdm import tqdm  # here: every other command (core check) starts without it

    said = None  # the pause last said: once each, not at every look
    with tqdm(total=0, unit="req", disable=None) as bar:
        while True:
            status = job.read_status()
            bar.total = status.total
            bar.set_postfix_str("paused" if status.paused_at else status.state)
            bar.update(status.done - bar.n)
            if status.paused_at and status.paused_at != said:  # its run window closed
                tqdm.write(status.message, file=sys.stderr)
                said = status.paused_at
            if status.is_final or status.interrupted:
                return status
            gone = worker is None or worker.poll() is not None
            stranded = gone and status.state == "queued"
            if stranded and EngineLock(job.path.parent).holder() is None:  # nobody took it
                worker = take_up(job)
            time.sleep(FOLLOW_SECONDS)


def job_named(job_id: str) -> JobFolder | None:
    """The job of that id in the data folder; None, said on stderr, where there is none."""
    job = JobFolder(data_paths().jobs / Path(job_id).name)
    if not job.spec_file.is_file():
        print(f"error: no job {job_id!r} in {data_paths().jobs}", file=sys.stderr)
        return None
    return job


def _output_of(job: JobFolder) -> str | None:
    return job.read_spec().output_path


def cmd_resume(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        started = resubmit(job, retry=args.retry, shard=getattr(args, "shard", None))
    except Refused as refused:
        print_refusal(refused)
        return EXIT_INVALID if refused.report is not None and refused.report.errors else EXIT_USAGE
    return _follow_to_end(job, _output_of(job), started.worker)


def cmd_cancel(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    print(cancel(job, now=args.now))
    return 0


def cmd_reconcile(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        report = reconcile(job)
    except CorruptLine as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
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
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    result = verify(job)
    if result.ok:
        print(f"job {job.job_id}: {result.describe()}")
        for name, head in result.heads.items():
            print(f"  chain head of {name}: {head}")
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


def cmd_jobs_list(args: argparse.Namespace) -> int:
    """Every job, newest first: id, state, requests and name (scripts: ``--json``), and a
    loading job's message (which model loads, or what it waits for); and the Batch API's
    batches that failed validation (no job: a ``batch_id`` and the reason)."""
    from core.api.batches import refused_rows  # the API's layer: only for this listing

    rows = []
    for job in list_jobs(data_paths().jobs):
        try:
            spec, status = job.read_spec(), job.read_status()
            row = {"job_id": job.job_id, "name": job.name, "state": status.display_state}
            if status.state == "loading" and not status.interrupted:  # its model, or its wait
                row["message"] = status.message
            rows.append({**row, "requests": spec.input_lines, "created_at": spec.created_at})
        except JobUnreadable as exc:  # that job's problem: the others are listed
            rows.append({"job_id": job.job_id, "name": "", "state": "unreadable"})
            print(f"warning: {exc}", file=sys.stderr)
    refused = refused_rows(data_paths().home)
    if refused:  # among the jobs by time (jobs alone: in their folders' order, newest first)
        rows = sorted(rows + refused, key=lambda row: row.get("created_at") or "", reverse=True)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
        return 0
    width = max(len(row["job_id"] or row["batch_id"]) for row in rows) if rows else 0
    for row in rows:
        requests = row.get("requests", "")
        name = row["name"] or "-"
        said = row.get("reason") or row.get("message")
        reason = f"  ({said})" if said else ""
        ident = row["job_id"] or row["batch_id"]
        print(f"{ident:<{width}}  {row['state']:<21}  {requests:>9}  {name}{reason}")
    return 0


def cmd_jobs_rename(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        name = rename_job(job, args.name)
    except (ValueError, JobUnreadable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"job {job.job_id} is now named {name!r}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    run = commands.add_parser("run", help="run a batch file on the local engine")
    run.add_argument("file", help="the batch file: a path, or s3://bucket/key.jsonl")
    run.add_argument(
        "-o",
        "--output",
        required=True,
        help="where to write the output JSONL (a path or s3://bucket/key.jsonl); the failed "
        "requests' lines also go beside it, into NAME.errors.jsonl",
    )
    run.add_argument("--model", help=f"model folder (default: {default_model_dir()})")
    run.add_argument(
        "--embedding-model",
        help=f"model folder /v1/embeddings lines run on (default: {default_embedding_model_dir()})",
    )
    run.add_argument(
        "--name", help="the job's name (default: the file's name and its prompt version)"
    )
    run.add_argument(
        "--windows",
        metavar="WINDOWS",
        help='the weekly hours it may run in, e.g. "weekdays 20:00-07:00, weekends all day" '
        "(in the studio's time zone, Settings); outside them it waits, then starts by "
        "itself, and at a window's close it pauses (the requests in the engine finish) and "
        "resumes when one opens. Default: its owner's, else the studio's default windows; "
        '"any": any time',
    )
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
        "--reuse",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--no-reuse computes every request, even one whose answer an earlier job "
        "already made (deterministic requests: temperature 0, a seed, vectors and scores); "
        "neither: BATCH_STUDIO_REUSE decides, on unless 0",
    )
    run.add_argument(
        "--keep-redactions",
        action="store_true",
        help="where the studio's policy redacts sensitive data (Settings), keep each "
        "placeholder and the value it stands for in the job's folder (redactions.json)",
    )
    run.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="requests inside the engine at once (default: its max concurrent sequences)",
    )
    ray_group = run.add_argument_group("Ray cluster (needs requirements-ray.txt)")
    ray_group.add_argument(
        "--ray", metavar="ADDRESS", help="run on a Ray cluster: local, auto or HOST:6379"
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
    defaults_arguments(run)
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
    cancel_cmd.add_argument(
        "--now",
        action="store_true",
        help="stop at once, without waiting for the engine's step (default: within seconds)",
    )
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

    ver = commands.add_parser(
        "verify",
        help="check a job's results for corruption and naive edits (hash chains) and completeness",
    )
    ver.add_argument("job", help="job id")
    ver.set_defaults(handler=cmd_verify)
    watch = commands.add_parser("watch", help="turn files dropped into the inbox into jobs")
    watch.add_argument("--model", help="model folder for inbox jobs (default: built-in)")
    watch.set_defaults(handler=cmd_watch)

    jobs = commands.add_parser("jobs", help="list jobs and name them")
    jobs_commands = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = jobs_commands.add_parser(
        "list", help="every job, newest first, with its name (and batches refused by the API)"
    )
    listing.add_argument("--json", action="store_true", help="print the jobs as JSON")
    listing.set_defaults(handler=cmd_jobs_list)
    rename = jobs_commands.add_parser("rename", help="give a job a new name")
    rename.add_argument("job", help="job id")
    rename.add_argument("name", help=f"the new name (at most {NAME_MAX} characters)")
    rename.set_defaults(handler=cmd_jobs_rename)
