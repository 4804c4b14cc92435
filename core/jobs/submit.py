"""The one way in: every job is made by :func:`submit` and every rerun of one by
:func:`resubmit`, so the rules on what may run live here and nowhere else.

The Run page, ``python -m core run``, the inbox (hot folder), the Jobs and Monitor pages'
Resume / Retry / rerun buttons, ``resume`` / ``retry`` and the Ray path all call these two
functions. Either the job is created (or restarted) and its worker started, or nothing
happens and :class:`Refused` lists every reason, each a line the user can act on.

The rules:

- the file has at least one request line;
- every ``custom_id`` is unique: a repeated id is refused always, naming its lines (two
  lines with one id would get one result between them, and one request would vanish);
- invalid lines are refused unless the submitter asked to skip them, in which case each
  gets an error result of its own;
- the model folders exist and are model folders, and the engine settings can work on this
  machine (the settings' own bounds are their models' field constraints, core/schemas.py);
- a name given for the job is not empty and not too long (``core.schemas.check_name``);
  without one, the job is named after its file (:func:`default_name`); a name another job
  has gets the first free `` (2)``, `` (3)``... (:mod:`core.jobs.names`);
- the owner (its API key, else its user) stays within its quota, if it has one
  (:mod:`core.jobs.quotas`): else :class:`OverQuota`, which the API answers with 429;
- a job over one of the studio's approval thresholds (:mod:`core.jobs.approval`) is made
  ``awaiting_approval`` with no worker: :func:`approve` queues it and starts one,
  :func:`reject` ends it ``failed`` with the reason. A rejected job never runs;
- its run windows (:mod:`core.jobs.windows`: its own, else its owner's default, else the
  studio's) can be read; it is queued at once, and the worker starts it when one opens.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from core.access import AccessConfig, access_config
from core.adapters import is_adapter_folder
from core.check import DUPLICATE_ID, EMPTY_FILE, CheckReport, check_file
from core.check.background import checked
from core.check.sensitive import (
    DEFAULT_PHONE_REGION,
    SENSITIVE_DATA,
    PolicyProblem,
    read_policy,
)
from core.config import data_paths, default_embedding_model_dir, reuse_default
from core.devices import gpu_problems, ray_installed
from core.endpoints import POOLING_URLS
from core.jobs.approval import (
    ApprovalProblem,
    ApprovalRequest,
    Decision,
    decide,
    hold,
    job_estimate,
    read_request,
    read_settings,
    refusal,
    request_needed,
)
from core.jobs.folder import (
    JobFolder,
    JobUnreadable,
    create_job,
    local_owner,
    remove_folder,
    start_worker,
)
from core.jobs.names import distinct_name
from core.jobs.quotas import QuotaProblem, over_quota
from core.jobs.windows import (
    Clock,
    RunWindows,
    WindowProblem,
    submission_notes,
    windows_for,
)
from core.model_folders import ModelError, check_model_folder
from core.model_names import line_models
from core.schemas import (
    BatchOrigin,
    EngineConfig,
    JobDefaults,
    JobSpec,
    JobState,
    JobStatus,
    JudgeLink,
    RaySettings,
    check_name,
    now_iso,
    read_name,
)

LISTED_PROBLEMS = 20  # problems of the file quoted in a refusal; the report has them all
VERSION_LINES = 1_000  # lines read for the prompt version of a default name


class Refused(Exception):
    """A job was not created or restarted.

    Attributes:
        problems: every reason, each a sentence the user can act on.
        report: the check of the file, when the file was checked.
    """

    def __init__(self, problems: list[str], report: CheckReport | None = None) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems
        self.report = report


class OverQuota(Refused):
    """A job its owner's quota has no room for (each problem says which limit, the use
    now and when it frees); nothing is wrong with the file or the settings."""


class Started(NamedTuple):
    """A job queued, and the worker just started for it (None: the worker holding the
    engine runs it next, or the job awaits approval: ``awaiting`` says why)."""

    job: JobFolder
    worker: subprocess.Popen | None
    awaiting: ApprovalRequest | None = None
    # What the submitter should know before it starts: when it runs (outside its run
    # windows), and a completion window its run windows cannot meet.
    notes: tuple[str, ...] = ()


@dataclass
class Submission:
    """Everything a job is made from besides its file.

    ``engine.model`` is the model folder every line runs on unless ``model_map`` sends its
    ``body.model`` elsewhere; ``ray`` runs the
    job on a Ray cluster instead of this machine.
    """

    engine: EngineConfig
    defaults: JobDefaults = field(default_factory=JobDefaults)
    skip_invalid: bool = False
    chunk_size: int | None = None
    shard_size: int = 10_000
    completion_window_hours: float | None = 24.0
    model_map: dict[str, str] = field(default_factory=dict)
    ray: RaySettings | None = None
    output_path: str | None = None
    source: str | None = None  # the file's name as the user knows it (an upload's own name)
    owner: str | None = None  # the signed-in user; None: this machine's user
    owner_key: str | None = None  # the id of the API key that submits it (core/api/keys.py)
    name: str | None = None  # the job's name; None: made from the file (see default_name)
    # Where /v1/embeddings lines run (None: the built-in embedding model, if the file has any).
    embedding_model: str | None = None
    judge: JudgeLink | None = None  # a judge job: what it grades (core/qa/judge.py)
    metadata: dict[str, str] = field(default_factory=dict)  # the submitter's labels
    batch: BatchOrigin | None = None  # made through the Batch API: what it asked for
    # Deterministic requests take answers already made (core/reuse); None: the studio's
    # default (core.config.reuse_default).
    reuse: bool | None = None
    # The weekly hours it may run in (core/jobs/windows.py's text form); None or "": its
    # owner's default, else the studio's; "any": any time, whatever the defaults.
    run_windows: str | None = None
    # Under the studio's ``redact`` policy, keep what was replaced in the job's folder
    # (``redactions.json``: the owner can map each placeholder back); off, it is nowhere.
    keep_redactions: bool = False


def _folder(path: str) -> str:
    """A model or adapter folder as a job records it (resolved); as given where it is
    neither (its problem is the settings' to say)."""
    if is_adapter_folder(Path(path).expanduser()):
        return str(Path(path).expanduser().resolve())
    try:
        return str(check_model_folder(path))
    except ModelError:
        return path


def planned_spec(submission: Submission) -> JobSpec:
    """The settings a job made of ``submission`` would run with: what :func:`submit`
    records in its ``job.json`` (model folders resolved, the studio's reuse default), less
    what only the job's creation knows (its id, input and owner). The one place that says
    it: submit makes the job from it, and a forecast (``core check``, Upload & check, Run)
    keys the file's lines by it (:class:`core.reuse.keys.RequestKeys`)."""
    s = submission
    # The names whose lines can run (the check refuses the others' lines, naming them).
    names = line_models({name: _folder(f) for name, f in s.model_map.items()})
    model_map = {name: _folder(f) for name, f in s.model_map.items() if name not in names.refused}
    return JobSpec(
        job_id="",
        created_at="",
        engine=s.engine.model_copy(update={"model": _folder(s.engine.model)}),
        defaults=s.defaults,
        skip_invalid=s.skip_invalid,
        chunk_size=s.chunk_size,
        shard_size=max(1, s.shard_size),
        model_map=model_map,
        adapters=names.adapters,
        embedding_model=None if s.embedding_model is None else _folder(s.embedding_model),
        ray=s.ray,
        reuse=reuse_default() if s.reuse is None else s.reuse,
    )


def owner_policy(submission: Submission, home: Path) -> str | None:
    """The policy for sensitive data of the submission's owner (an API key's or a user's
    name), where Settings or ``core keys sensitive`` gave it one of its own; None: the
    studio's applies (the check reads it, and says so where its file is unreadable)."""
    owner = submission.owner or local_owner(None).removeprefix("user:")
    try:
        return read_policy(home).owners.get(owner)
    except PolicyProblem:
        return None


def submission_owner(submission: Submission) -> tuple[str, str]:
    """Whose quota a submission counts against (as :func:`core.jobs.folder.job_owner` will
    name the job's owner) and how people know that owner."""
    if submission.owner_key is not None:
        return f"key:{submission.owner_key}", f"key {submission.owner or submission.owner_key!r}"
    owner = local_owner(submission.owner)
    return owner, f"user {owner.removeprefix('user:')!r}"


def _model_options(submission: Submission, problems: list[str]) -> dict[str, Any]:
    """What lets the check judge each line against the models it runs on (prompts within
    the context, token ids in the vocabulary, embedding inputs within their limit), so
    the engine never refuses a line the check let through. The mapped names always: a
    line whose name maps to a folder that is gone or an adapter that cannot run is
    refused by the check, naming its line. The job's model only where it has a tokenizer
    and the settings are sound: else the rest of the check is structural, and such lines
    fail at run time, as the engine refuses them."""
    model = Path(submission.engine.model).expanduser()
    if problems or not (model / "tokenizer.json").is_file():
        return {"model_map": submission.model_map}
    return {
        "model_folder": str(model),
        "model_map": submission.model_map,
        "embedding_folder": submission.embedding_model,
    }


def _refusals(report: CheckReport) -> dict[int, dict[str, str | None]]:
    """Each line the check refused: the worker gives it an error result of its own (with
    ``skip_invalid``) rather than run it. Its structural problems the worker finds again;
    those against a model only this check sees."""
    refused: dict[int, dict[str, str | None]] = {}
    for problem in report.errors:
        if problem.line > 0 and problem.line not in refused:
            refused[problem.line] = {"message": problem.message, "param": problem.param}
    return refused


def _embedding_model(submission: Submission, report: CheckReport) -> str | None:
    """The embedding model folder, checked, when the file has embeddings (or score, rerank)
    lines (recorded in ``job.json``, so a rerun embeds alike)."""
    if submission.embedding_model is None and not any(report.urls.get(u) for u in POOLING_URLS):
        return None
    return str(check_model_folder(submission.embedding_model or default_embedding_model_dir()))


def file_problems(report: CheckReport, skip_invalid: bool) -> list[str]:
    """The rules on the file's content, from its check report."""
    if report.cancelled:
        return ["the check of the file was stopped before its end; check it again"]
    if report.lines == 0:
        return ["the file has no request lines (it is empty or blank)"]
    errors = [p for p in report.errors if p.code != EMPTY_FILE]
    refused = [p.message for p in errors if p.code == SENSITIVE_DATA]
    if refused:
        return refused
    repeats = [p for p in errors if p.code == DUPLICATE_ID]
    if repeats:
        listed = "; ".join(f"line {p.line}: {p.message}" for p in repeats[:LISTED_PROBLEMS])
        more = report.duplicates - min(len(repeats), LISTED_PROBLEMS)
        return [
            f"{report.duplicates} line(s) repeat a custom_id of an earlier line, and each "
            f"request needs its own id to get its own result: {listed}"
            + (f"; and {more} more" if more > 0 else "")
        ]
    if report.invalid and not skip_invalid:
        listed = "; ".join(f"line {p.line}: {p.message}" for p in errors[:LISTED_PROBLEMS])
        return [
            f"{report.invalid} of {report.lines} lines are invalid; fix them, or skip them "
            "(--skip-invalid; on Run, tick the box to run the valid lines): each invalid line "
            f"then gets an error result. {listed}"
        ]
    if report.valid == 0 and not report.invalid:
        return ["the file has no valid request lines"]
    return []


def settings_problems(submission: Submission, gpus: int | None = None) -> list[str]:
    """The rules on the settings: model folders, engine, Ray and job defaults."""
    problems = []
    try:
        check_model_folder(submission.engine.model)
    except ModelError as exc:
        problems.append(str(exc))
    # The mapped names are the check's: it refuses the lines of one that cannot run.
    if submission.ray is not None and line_models(submission.model_map).adapters:
        problems.append("LoRA adapters run on this machine's engine, not on a Ray cluster")
    problems += gpu_problems(submission.engine, gpus)
    if submission.shard_size < 1:
        problems.append("requests per shard must be at least 1")
    if submission.chunk_size is not None and submission.chunk_size < 1:
        problems.append("requests inside the engine at once must be at least 1")
    if submission.ray is not None and not ray_installed():
        problems.append("Ray is not installed here: pip install -r requirements-ray.txt")
    if submission.name is not None:
        try:
            check_name(submission.name)
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def prompt_version(file: Path) -> str | None:
    """The ``metadata.prompt_version`` the builder writes into every line, when the file's
    first lines (up to :data:`VERSION_LINES`) all carry the same one; else None."""
    found: set[str] = set()
    with file.open("rb") as handle:
        for number, raw in enumerate(handle):
            if number >= VERSION_LINES:
                break
            if not raw.strip():
                continue
            try:
                metadata = json.loads(raw)["body"]["metadata"]
                found.add(str(metadata["prompt_version"]))
            except (ValueError, KeyError, TypeError):
                return None
            if len(found) > 1:
                return None
    return found.pop() if found and next(iter(found)).strip() else None


def default_name(file: Path, source: str | None = None) -> str:
    """A job's name when the submitter gives none: the input file's name without its
    suffix (an upload's own name, from ``source``) and the prompt version the builder
    recorded, e.g. ``tickets, prompt v1``."""
    stem = Path(source or file.name).stem or file.name
    version = prompt_version(file)
    return read_name(f"{stem}, prompt {version}" if version else stem)


def submit(
    file: str | Path,
    submission: Submission,
    jobs_dir: Path | None = None,
    *,
    gpus: int | None = None,
) -> Started:
    """Checks the file and the settings, then creates the job and starts its worker.

    Raises:
        Refused: with every reason, when the job may not run; nothing was created.
        OSError: the job folder could not be written (a full disk); nothing was kept.
    """
    file = Path(file)
    problems = settings_problems(submission, gpus)
    home = (jobs_dir or data_paths().jobs).parent
    report = checked(
        file,
        defaults=submission.defaults,
        sensitive=owner_policy(submission, home),
        **_model_options(submission, problems),
    )
    problems += file_problems(report, submission.skip_invalid)
    redact = report.sensitive is not None and report.sensitive.policy == "redact"
    if redact and submission.ray is not None:
        problems.append(
            "the studio's policy redacts sensitive data, which happens on this machine's "
            "engine, not on a Ray cluster (Settings, Sensitive data)"
        )
    jobs_dir = jobs_dir or data_paths().jobs
    windows = _windows(submission, jobs_dir.parent, problems)
    if problems:
        raise Refused(problems, report)
    owner, who = submission_owner(submission)
    try:
        over = over_quota(jobs_dir.parent, jobs_dir, owner, who, report.lines)
    except QuotaProblem as exc:
        raise Refused([f"the quotas cannot be read: {exc}"]) from None
    if over:
        raise OverQuota(over)
    try:
        request = request_needed(report, jobs_dir.parent, jobs_dir, who)
    except ApprovalProblem as exc:
        raise Refused([f"the approval thresholds cannot be read: {exc}"]) from None
    s = submission
    planned = planned_spec(s)
    name = check_name(s.name) if s.name is not None else default_name(file, s.source)
    job = create_job(
        file,
        jobs_dir,
        planned.engine,
        s.defaults,
        skip_invalid=s.skip_invalid,
        chunk_size=s.chunk_size,
        completion_window_hours=s.completion_window_hours,
        source=s.source,
        output_path=s.output_path,
        ray=s.ray,
        # Only the names its lines use: the studio's map names every model it knows, and the
        # job's models (the Jobs table, its index) are those it runs.
        model_map={n: f for n, f in planned.model_map.items() if report.models.get(n)},
        shard_size=s.shard_size,
        owner=s.owner,
        owner_key=s.owner_key,
        name=distinct_name(jobs_dir, name),  # another job's name gets " (2)"
        embedding_model=_embedding_model(s, report),
        judge=s.judge,
        metadata=s.metadata,
        batch=s.batch,
        endpoints=[url for url, lines in report.urls.items() if lines],
        reuse=planned.reuse,
        run_windows=windows,
        redact=redact,
        keep_redactions=s.keep_redactions,
        # The region the check read phone numbers as: the worker redacts with it.
        phone_region=report.sensitive.region if report.sensitive else DEFAULT_PHONE_REGION,
    )
    try:
        job.write_refusals(_refusals(report))
        notes = _window_notes(windows, s.completion_window_hours, report, jobs_dir)
        if request is not None:  # nothing runs before a person approves it
            hold(job, request)
            return Started(job, None, request, notes)
        worker = start_worker(job)  # its queued status is written first
    except BaseException:  # a full disk: the job was never whole, so nothing of it stays
        remove_folder(job)
        raise
    return Started(job, worker, None, notes)


def planned_windows(submission: Submission, home: Path) -> RunWindows | None:
    """The run windows a job of ``submission`` gets: its own, else its owner's default,
    else the studio's (what Run shows before Start).

    Raises:
        WindowProblem: they cannot be kept (bad text, unreadable settings).
    """
    owner = submission.owner or local_owner(None).removeprefix("user:")
    return windows_for(home, submission.run_windows, owner)


def _windows(submission: Submission, home: Path, problems: list[str]) -> RunWindows | None:
    """The job's run windows; a reason added to ``problems`` where they cannot be kept."""
    try:
        return planned_windows(submission, home)
    except WindowProblem as exc:
        problems.append(f"run windows: {exc}")
        return None


def _window_notes(
    windows: RunWindows | None, hours: float | None, report: CheckReport, jobs_dir: Path
) -> tuple[str, ...]:
    """When a job in run windows runs, and a completion window they cannot meet."""
    if windows is None:
        return ()
    seconds = job_estimate(report, jobs_dir.parent, jobs_dir).seconds if hours else None
    return submission_notes(windows, hours, seconds, Clock().now())


def _decidable(job: JobFolder, who: str, access: AccessConfig | None) -> ApprovalRequest:
    """The job's request, when ``who`` may decide on it now; else :class:`Refused`."""
    status = job.read_status()
    request = read_request(job)
    if status.state != JobState.AWAITING_APPROVAL or request is None:
        raise Refused([f"job {job.job_id} is {status.display_state}, not awaiting approval"])
    try:
        settings = read_settings(job.path.parent.parent)
    except ApprovalProblem as exc:
        raise Refused([f"the approval settings cannot be read: {exc}"]) from None
    why_not = refusal(who, settings, access if access is not None else access_config())
    if why_not:
        raise Refused([why_not])
    return request


def approve(job: JobFolder, who: str, access: AccessConfig | None = None) -> Started:
    """Approves a job awaiting approval: it is queued and its worker started (or woken),
    as :func:`submit` does for a job within the thresholds.

    Args:
        job: the job folder.
        who: who approves (an email where sign-in is on, else this machine's user).
        access: the sign-in configuration (None: the secrets files', for the CLI).

    Raises:
        Refused: the job does not await approval, or ``who`` may not approve.
    """
    request = _decidable(job, who, access)
    with job.status_lock():  # a cancel or a rejection that came first holds
        status = job.read_status()
        if status.state != JobState.AWAITING_APPROVAL:
            raise Refused([f"job {job.job_id} is {status.display_state} now"])
        decide(job, request, Decision(approved=True, by=who, at=now_iso()))
        status.enter("queued", f"approved by {who}; waiting for the engine")
        job.write_status(status)
    return Started(job, start_worker(job))  # as submit: queued, then a worker started or woken


def reject(job: JobFolder, who: str, why: str, access: AccessConfig | None = None) -> None:
    """Rejects a job awaiting approval: it ends ``failed`` with the reason, and never runs.

    Raises:
        Refused: no reason given, the job does not await approval, or ``who`` may not.
    """
    if not why.strip():
        raise Refused(["say why the job is rejected: the submitter reads it"])
    request = _decidable(job, who, access)
    reason = f"rejected by {who}: {why.strip()}"
    with job.status_lock():
        status = job.read_status()
        if status.state != JobState.AWAITING_APPROVAL:
            raise Refused([f"job {job.job_id} is {status.display_state} now"])
        decide(job, request, Decision(approved=False, by=who, at=now_iso(), why=why.strip()))
        status.enter("failed", reason)
        status.error, status.finished_at = reason, now_iso()
        job.write_status(status)


def resubmit(job: JobFolder, *, retry: bool = False, shard: int | None = None) -> Started:
    """Starts a job's worker again (resume, retry, rerun of failures, one shard), by the
    same rules as :func:`submit` on the job's own input.

    Args:
        job: the job folder.
        retry: also rerun failed requests (never invalid input).
        shard: with ``retry``, only this shard's requests (0-based).

    Raises:
        Refused: the job is running, the shard does not exist, a result line is damaged
            (its file and line named), or its input breaks a rule (an old job whose file
            repeats an id is refused here, with the lines).
    """
    from core.jobs.ledger import read_ledger, shards
    from core.jobs.output_file import CorruptLine

    status = job.read_status()
    problem = _approval_problem(job, status)
    if problem:
        raise Refused([problem])
    if not status.is_final and not status.interrupted and status.state != "created":
        raise Refused([f"job {job.job_id} is {status.state} (pid {status.pid}); wait or cancel"])
    spec = job.read_spec()
    # Read before the job is queued: a damaged result line refuses the restart and leaves
    # the job as it was (its worker would otherwise end a completed job ``failed``).
    try:
        ledger = read_ledger(job)
    except CorruptLine as exc:
        raise Refused([f"{exc}; the job is left as it was"]) from None
    report = check_file(job.input, spec.defaults)
    problems = file_problems(report, spec.skip_invalid)
    if shard is not None and not problems:
        count = len(shards(ledger, spec.shard_size))
        if not 0 <= shard < count:
            problems.append(f"job {job.job_id} has no shard {shard} (it has {count})")
    if problems:
        raise Refused(problems, report)
    return Started(job, start_worker(job, retry=retry, shard=shard))


def _approval_problem(job: JobFolder, status: JobStatus) -> str | None:
    """Why a job may not run again for want of approval: it awaits one, or was rejected."""
    if status.state == JobState.AWAITING_APPROVAL:
        return f"job {job.job_id} awaits approval: approve it first (Jobs, or core approve)"
    try:
        request = read_request(job)
    except JobUnreadable as exc:
        return str(exc)
    decision = request.decision if request is not None else None
    if decision is not None and not decision.approved:
        return (
            f"job {job.job_id} was rejected by {decision.by} ({decision.why}): it never runs; "
            "submit the file again to ask anew"
        )
    return None


def take_up(job: JobFolder) -> subprocess.Popen | None:
    """Starts a worker for an admitted job left ``queued`` with no worker to run it (its
    own exited while another held the engine, and that one has ended since)."""
    status = job.read_status()
    return start_worker(job, retry=status.retry, shard=status.retry_shard)
