"""Approval for big jobs: thresholds, and a person's yes or no before a job over one runs.

The studio's thresholds (``approval.json`` in the data folder, set on Settings) are a
number of lines, of estimated tokens (prompt + expected output) and an estimated cost; any
may be unset. :func:`core.jobs.submit.submit` makes a job over one ``awaiting_approval``
and starts no worker; :func:`core.jobs.submit.approve` queues it and starts one,
:func:`core.jobs.submit.reject` ends it ``failed`` with the reason. The job keeps its
request (who asked, the estimate, which thresholds) and the decision in its own
``approval.json``.

The estimate is the one of Upload & check and ``core check`` (:mod:`core.plan.estimate`,
priced by :mod:`core.plan.pricing`). A figure that cannot be estimated (tokens not counted:
the model folder has no tokenizer; no price for the model) counts as over its threshold:
nothing big runs unseen.

Who may approve: where sign-in is on, the admins (``[access] admins`` in the secrets,
:mod:`core.access`) and the approvers named in Settings (each a user the allow-list lets
in); without sign-in, this machine's user.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from pydantic import Field, ValidationError

from core.access import AccessConfig, allowed
from core.check import CheckReport
from core.files import JsonUnreadable, load_json, write_atomic
from core.jobs.folder import JobFolder, JobUnreadable
from core.plan.estimate import estimate, format_duration
from core.plan.pricing import format_money, load_prices
from core.schemas import JobState, Model, now_iso, problems_of, to_json

SETTINGS_FILE = "approval.json"  # in the data folder: thresholds and approvers
REQUEST_FILE = "approval.json"  # in a job folder: its request and the decision
METADATA_KEY = "approval"  # the Batch API's metadata key saying a batch awaits approval
THRESHOLDS = {"lines": "lines", "tokens": "estimated tokens", "cost": "estimated cost"}


class ApprovalProblem(ValueError):
    """Thresholds or approvers that cannot be kept, or a decision that cannot be made;
    the message says every reason."""


class ApprovalSettings(Model):
    """The studio's thresholds (None: not set) and the approvers named (emails)."""

    lines: int | None = Field(None, gt=0)
    tokens: int | None = Field(None, gt=0)
    cost: float | None = Field(None, gt=0, allow_inf_nan=False)
    approvers: list[str] = Field(default_factory=list)

    @property
    def is_set(self) -> bool:
        return any(getattr(self, name) is not None for name in THRESHOLDS)


class Estimate(Model):
    """What a job is expected to take, as the request to approve says it."""

    lines: int
    tokens: int | None = None  # prompt + expected output; None: not counted
    seconds: float | None = None  # None: no run of the model measured yet
    cost: float | None = None  # None: no price for the model
    cost_text: str = "unknown"

    def describe(self) -> str:
        tokens = f"{self.tokens:,}" if self.tokens is not None else "not counted"
        return (
            f"{self.lines:,} lines, {tokens} tokens, time {format_duration(self.seconds)}, "
            f"cost {self.cost_text}"
        )


class Decision(Model):
    approved: bool
    by: str
    at: str
    why: str = ""


class ApprovalRequest(Model):
    """A job's request to run (its ``approval.json``), and the decision once made."""

    asked_by: str
    asked_at: str
    reasons: list[str]
    estimate: Estimate
    decision: Decision | None = None

    def describe(self) -> str:
        """One line: why it waits, the estimate and who asked."""
        return (
            f"awaiting approval: {'; '.join(self.reasons)}. Estimate: "
            f"{self.estimate.describe()}. Asked by {self.asked_by}"
        )


# -- the studio's settings ------------------------------------------------------------------


def settings_file(home: Path) -> Path:
    return home / SETTINGS_FILE


def read_settings(home: Path) -> ApprovalSettings:
    """The thresholds and approvers (none when never set).

    Raises:
        ApprovalProblem: the file is not one the studio wrote (edited by hand, say).
    """
    try:
        return ApprovalSettings.model_validate_json(settings_file(home).read_bytes())
    except FileNotFoundError:
        return ApprovalSettings()
    except (OSError, ValueError) as exc:
        raise ApprovalProblem(f"{settings_file(home)}: {exc}") from None


def check_settings(
    access: AccessConfig,
    *,
    lines: float | None = None,
    tokens: float | None = None,
    cost: float | None = None,
    approvers: list[str] | None = None,
) -> ApprovalSettings:
    """The settings as given, checked whole: each threshold above zero (None: unset), each
    approver a known user, and someone able to approve where thresholds are set.

    Raises:
        ApprovalProblem: every reason, each a sentence; nothing is kept.
    """
    problems = []
    given = {"lines": lines, "tokens": tokens, "cost": cost}
    for name, value in given.items():
        if value is not None and not value > 0:  # NaN too
            problems.append(
                f"the {THRESHOLDS[name]} threshold must be above 0 (got {value:g}); leave it "
                "empty to set none"
            )
    for name in ("lines", "tokens"):
        value = given[name]
        if value is not None and value > 0 and value != int(value):
            problems.append(f"the {THRESHOLDS[name]} threshold must be a whole number")
    named = list(dict.fromkeys(a.strip() for a in approvers or [] if a.strip()))
    for who in named:
        problem = unknown_user(who, access)
        if problem:
            problems.append(problem)
    if (
        access.sign_in
        and not named
        and not access.admins
        and any(v is not None for v in given.values())
    ):
        problems.append(
            "nobody could approve a job over a threshold: name approvers, or admins in "
            "[access] admins of .streamlit/secrets.toml"
        )
    if problems:
        raise ApprovalProblem("; ".join(problems))
    try:
        return ApprovalSettings(
            lines=None if lines is None else int(lines),
            tokens=None if tokens is None else int(tokens),
            cost=cost,
            approvers=named,
        )
    except ValidationError as exc:  # the checks above say it first; a last guard
        raise ApprovalProblem("; ".join(problems_of(exc))) from None


def save_settings(home: Path, settings: ApprovalSettings) -> None:
    write_atomic(settings_file(home), to_json(settings))


def unknown_user(who: str, access: AccessConfig) -> str | None:
    """Why ``who`` cannot be named an approver (None: a known user): where sign-in is on,
    an email the allow-list lets in; without it, this machine's user, the only one."""
    if access.sign_in:
        if allowed(who, access.allowed_users):
            return None
        return (
            f"approver {who!r} is not a user of this studio: name an email the sign-in "
            "allow-list ([access] allowed_users) lets in"
        )
    local = getpass.getuser()
    if who == local:
        return None
    return (
        f"approver {who!r} does not exist here: without sign-in the only user is this "
        f"machine's ({local})"
    )


def refusal(who: str, settings: ApprovalSettings, access: AccessConfig) -> str | None:
    """Why ``who`` may not approve or reject (None: they may)."""
    if not access.sign_in:
        local = getpass.getuser()
        if who == local:
            return None
        return f"{who} may not approve: without sign-in, this machine's user ({local}) approves"
    email = who.strip().lower()
    admins = [a.strip().lower() for a in access.admins]
    if email in admins or email in [a.strip().lower() for a in settings.approvers]:
        return None
    named = ", ".join([*access.admins, *settings.approvers]) or "nobody is named"
    return f"{who} may not approve: only the admins and the approvers in Settings may ({named})"


# -- a job's request ------------------------------------------------------------------------


def job_estimate(report: CheckReport, home: Path, jobs_dir: Path) -> Estimate:
    """The estimate of a checked file, as Upload & check and ``core check`` make it."""
    from core.jobs.queue import models_loaded

    result = estimate(report, load_prices(home), loaded=models_loaded(jobs_dir), home=home)
    counted = bool(result.models)
    return Estimate(
        lines=report.lines,
        tokens=result.input_tokens + result.expected_output_tokens if counted else None,
        seconds=result.seconds,
        cost=result.cost,
        cost_text=result.cost_text,
    )


def over_thresholds(settings: ApprovalSettings, figures: Estimate, currency: str) -> list[str]:
    """Each threshold the job is over, as a sentence (an unknown figure counts as over)."""
    over = []
    if settings.lines is not None and figures.lines > settings.lines:
        over.append(f"{figures.lines:,} lines is over the threshold of {settings.lines:,}")
    if settings.tokens is not None:
        if figures.tokens is None:
            over.append(
                "its tokens could not be estimated (the model folder has no tokenizer), and "
                f"the threshold is {settings.tokens:,}"
            )
        elif figures.tokens > settings.tokens:
            over.append(
                f"{figures.tokens:,} estimated tokens is over the threshold of {settings.tokens:,}"
            )
    if settings.cost is not None:
        limit = format_money(settings.cost, currency)
        if figures.cost is None:
            over.append(f"its cost is {figures.cost_text}, and the threshold is {limit}")
        elif figures.cost > settings.cost:
            over.append(
                f"an estimated cost of {figures.cost_text} is over the threshold of {limit}"
            )
    return over


def request_needed(
    report: CheckReport, home: Path, jobs_dir: Path, asked_by: str
) -> ApprovalRequest | None:
    """The request a job of this checked file needs before it runs; None when it is
    within every threshold (or none is set).

    Raises:
        ApprovalProblem: the settings cannot be read.
    """
    settings = read_settings(home)
    if not settings.is_set:
        return None
    figures = job_estimate(report, home, jobs_dir)
    reasons = over_thresholds(settings, figures, load_prices(home).currency)
    if not reasons:
        return None
    return ApprovalRequest(asked_by=asked_by, asked_at=now_iso(), reasons=reasons, estimate=figures)


def hold(job: JobFolder, request: ApprovalRequest) -> None:
    """Keeps the request and makes the job ``awaiting_approval`` (no worker takes it)."""
    write_atomic(job.path / REQUEST_FILE, to_json(request))
    with job.status_lock():
        status = job.read_status()
        status.enter(JobState.AWAITING_APPROVAL, request.describe())
        job.write_status(status)


def read_request(job: JobFolder) -> ApprovalRequest | None:
    """The job's request to run; None for a job that never needed one.

    Raises:
        JobUnreadable: its ``approval.json`` cannot be read.
    """
    try:
        return ApprovalRequest.model_validate(load_json(job.path / REQUEST_FILE))
    except JsonUnreadable as exc:
        if exc.missing:
            return None
        raise JobUnreadable(job.job_id, f"approval.json: {exc.reason}") from None
    except ValidationError as exc:
        raise JobUnreadable(job.job_id, f"approval.json: {'; '.join(problems_of(exc))}") from None


def decide(job: JobFolder, request: ApprovalRequest, decision: Decision) -> None:
    """Keeps the decision beside the request."""
    kept = request.model_copy(update={"decision": decision})
    write_atomic(job.path / REQUEST_FILE, to_json(kept))
