"""``approve`` and ``reject``: a person's decision on a job awaiting approval
(core/jobs/approval.py), through the same rule as the Jobs page's buttons."""

from __future__ import annotations

import argparse
import getpass
import sys

from core.cli.common import EXIT_USAGE
from core.cli.jobs import job_named
from core.jobs.folder import JobUnreadable
from core.jobs.submit import Refused, approve, reject

BY_HELP = (
    "who decides: with sign-in on, an admin's or a named approver's email; without it, "
    "this machine's user (the default). The command line has the data folder's own "
    "access: the decision records this name"
)


def cmd_approve(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        started = approve(job, args.by)
    except (Refused, JobUnreadable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    runner = f"worker pid {started.worker.pid}" if started.worker else "the engine's worker"
    print(f"job {job.job_id} approved by {args.by}: queued, {runner} runs it")
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    job = job_named(args.job)
    if job is None:
        return EXIT_USAGE
    try:
        reject(job, args.by, args.why)
    except (Refused, JobUnreadable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"job {job.job_id} rejected by {args.by}: it ended failed, and never runs")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    approve_cmd = commands.add_parser(
        "approve", help="approve a job awaiting approval: it is queued and runs"
    )
    approve_cmd.add_argument("job", help="job id")
    approve_cmd.add_argument("--by", default=getpass.getuser(), help=BY_HELP)
    approve_cmd.set_defaults(handler=cmd_approve)
    reject_cmd = commands.add_parser(
        "reject", help="reject a job awaiting approval: it ends failed with the reason"
    )
    reject_cmd.add_argument("job", help="job id")
    reject_cmd.add_argument("--why", required=True, help="the reason, which the submitter reads")
    reject_cmd.add_argument("--by", default=getpass.getuser(), help=BY_HELP)
    reject_cmd.set_defaults(handler=cmd_reject)
