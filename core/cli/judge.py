"""``judge``: a model grades a job's answers (or prefers one of two jobs'), for pipelines.

Prints the new judge job's id alone on stdout (``JOB=$(python -m core judge ...)``); what
else it says goes to stderr. The judge job runs in its own worker, like ``run``'s, and its
verdicts join the graded job's checks once ingested (``core export``, the Checks page).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.cli.common import (
    EXIT_INVALID,
    EXIT_JOB_FAILED,
    EXIT_USAGE,
    input_file,
    model_folder,
    open_store,
)
from core.schemas import check_name

if TYPE_CHECKING:
    from core.qa.judge import JudgeSettings


def cmd_judge(args: argparse.Namespace) -> int:
    from core.cli.jobs import who_runs
    from core.jobs.submit import Refused
    from core.qa.judge import (
        Choice,
        JudgeError,
        JudgeSettings,
        check_template,
        start_judge,
    )
    from core.qa.pairwise import start_pairwise

    template_path = input_file(args.template)
    if template_path is None:
        return EXIT_USAGE
    text = template_path.read_text(encoding="utf-8", errors="replace")
    try:
        check_template(text)
        if args.name is not None:
            check_name(args.name)
    except JudgeError as exc:
        for problem in exc.problems:
            print(f"error: {template_path}: {problem}", file=sys.stderr)
        return EXIT_INVALID
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.max_tokens < 1:
        print("error: --max-tokens must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    model = model_folder(args.model)
    if model is None:
        return EXIT_USAGE
    if args.failures_of:
        choice = Choice("failures", rule=args.failures_of)
    elif args.sample:
        choice = Choice("sample", sample_id=args.sample)
    else:
        choice = Choice("all")
    settings = JudgeSettings(str(model), max_tokens=args.max_tokens, name=args.name)
    for attempt in (1, 2):
        store = open_store([args.job, *([args.against] if args.against else [])])
        if store is None:
            return EXIT_USAGE
        try:
            label = store.job_names().get
            named = lambda job_id, get=label: get(job_id) or job_id  # noqa: E731
            if args.against:
                started = start_pairwise(store, args.job, args.against, text, settings, label=named)
            else:
                started = start_judge(store, args.job, text, settings, choice, label=named)
            break
        except JudgeError as exc:
            if not (exc.calibration and attempt == 1 and _unsettled(text, settings)):
                for problem in exc.problems:
                    print(f"{'refused' if exc.calibration else 'error'}: {problem}",
                          file=sys.stderr)  # fmt: skip
                # A template that fails on some results is the template's fault; nothing
                # to judge (an empty choice, an unknown rule or sample) is how it was asked.
                return EXIT_INVALID if exc.template else EXIT_USAGE
        except Refused as refused:
            for problem in refused.problems:
                print(f"refused: {problem}", file=sys.stderr)
            return EXIT_USAGE
        finally:
            store.close()
        code = _calibrate(text, settings)  # the store is closed while the model is asked
        if code:
            return code
    job = started.job
    print(
        f"judge job {job.job_id} started: {who_runs(job, started.worker)}, folder {job.path}; "
        f"its verdicts become the check {job.read_spec().judge.check}",
        file=sys.stderr,
    )
    refused = len(job.read_refusals())
    if refused:
        print(
            f"{refused} answer(s) are more than the judge's model can take (beyond its "
            "context): not graded, each with the reason as its verdict's reason",
            file=sys.stderr,
        )
    print(job.job_id)
    return 0


def _unsettled(text: str, settings: JudgeSettings) -> bool:
    """True where this judge has no calibration yet, or one still running."""
    from core.qa.judge import calibration

    found = calibration(text, settings)
    return found is None or found.state == "running"


def _calibrate(text: str, settings: JudgeSettings) -> int:
    """Calibrates this judge (or waits for its calibration), saying what it found; 0 where
    it passed, else the exit code."""
    from core.jobs.submit import Refused
    from core.qa import calibration as cal
    from core.qa.judge import JudgeError, calibration, calibration_key, start_calibration

    found = calibration(text, settings)
    try:
        found = found or start_calibration(text, settings)
    except (JudgeError, Refused) as exc:
        for problem in exc.problems:
            print(f"error: calibration: {problem}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"calibrating the judge: {Path(settings.model).name} grades {found.items} answers "
        f"whose verdicts are known (job {found.job_id}) before it may judge",
        file=sys.stderr,
    )
    found = cal.wait(calibration_key(text, settings))
    if found is None or found.state == "running":
        print("error: the calibration job did not complete: run the command again",
              file=sys.stderr)  # fmt: skip
        return EXIT_JOB_FAILED
    if not found.passed:
        print(f"refused: {found.refusal()}", file=sys.stderr)
        return EXIT_USAGE
    print(f"calibrated: {found.summary()}", file=sys.stderr)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    judge = commands.add_parser(
        "judge", help="a model grades a job's answers (a judge job; prints its id)"
    )
    judge.add_argument("job", help="the job whose answers are graded (side A with --against)")
    judge.add_argument("--template", required=True, help="the judge template (Jinja)")
    judge.add_argument(
        "--model",
        help="the judge's model folder (default: the built-in one, too small to pass calibration)",
    )
    which = judge.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="every answer (the default)")
    which.add_argument("--failures-of", metavar="RULE", help="only the answers RULE failed")
    which.add_argument("--sample", metavar="SAMPLE_ID", help="only a review sample's items")
    which.add_argument(
        "--against", metavar="JOB_B", help="a pairwise judge: JOB's answers (A) against JOB_B's"
    )
    judge.add_argument("--name", help="the judge job's name")
    judge.add_argument(
        "--max-tokens", type=int, default=96, help="tokens of each verdict (default 96)"
    )
    judge.set_defaults(handler=cmd_judge)
