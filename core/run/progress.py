"""What Monitor says of a job's progress: durations, the work done, the ETA, the verdict.

Text only, from a job's status and its live rates (:mod:`core.run.monitoring`): the page
draws it, and these stay testable without one.
"""

from __future__ import annotations

from core.jobs.recovery import resumes_by_itself
from core.run.monitoring import Rates
from core.schemas import JobStatus


def duration(seconds: float | None) -> str:
    """``m:ss`` or ``h:mm:ss``; "–" for None."""
    if seconds is None:
        return "–"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def job_seconds(status: JobStatus) -> float | None:
    """Running time over all runs (a status from before it was kept: its run's)."""
    return status.job_seconds if status.job_seconds is not None else status.elapsed_seconds


def nothing_to_watch(status: JobStatus) -> bool:
    """Whether the job is done changing: final, or interrupted and not resuming by itself
    (an interrupted job that resumes by itself is watched on)."""
    return status.is_final or (status.interrupted and not resumes_by_itself(status))


def eta(status: JobStatus, speed: Rates) -> tuple[str, str]:
    """The ETA metric's value and its help."""
    if status.state == "completed":
        return "done", "The job has finished."
    if status.is_final or status.interrupted:
        return "–", "Nothing is running: a resume runs the requests without a result."
    if status.state == "cancelling":
        return "–", "Cancelling: the engine stops within seconds; results written stay."
    if speed.loading:
        if speed.load_left_seconds is None:
            return "loading", "The model is loading; the ETA follows once it runs."
        took = duration(status.measured_load_seconds)
        help = (
            f"The model is loading; its last load here took {took}. The ETA follows once it runs."
        )
        return f"loading, ~{duration(speed.load_left_seconds)}", help
    if speed.eta_seconds is None:
        if speed.eta_counts == "requests":
            return "estimating", "Known once the first results are written."
        return "estimating", "Known once the engine has generated its first tokens."
    if speed.eta_counts == "requests":
        help = "The requests still without a result, at the rate they are finishing now."
        return duration(speed.eta_seconds), help
    if speed.eta_is_bound:
        help = (
            "At most: no answer of this model was measured yet, so every answer is taken "
            "to reach its max_tokens. Later runs use the measured lengths."
        )
        return f"≤ {duration(speed.eta_seconds)}", help
    help = "The output still expected (measured answer lengths under each line's limit) at "
    help += "the current speed."
    return duration(speed.eta_seconds), help


def work_text(work_done: float, status: JobStatus) -> str:
    """The share of the output generated, against the total it is measured on."""
    expected = status.expected_output_tokens or 0
    if status.expected_is_bound:  # no answer measured: every answer taken to its limit
        return f"{work_done:.0%} of at most {expected:,} output tokens generated"
    return f"{work_done:.0%} of about {expected:,} expected output tokens generated"


def interrupted_text(status: JobStatus) -> str:
    """What an interrupted job's warning says will happen to it."""
    what = (
        "The studio resumes the job by itself within seconds (once), or Resume does it now: it runs"
        if resumes_by_itself(status)
        else "It had been resumed by itself once already, so it is not again: Resume runs"
    )
    return (
        f"The worker stopped without finishing (killed or crashed). {what} "
        f"only the {status.left:,} requests that have no result yet."
    )


def final_summary(status: JobStatus) -> str:
    """A finished job's counts, what it made and how long it took, as one sentence."""
    made = (  # a job of embeddings only makes vectors, not tokens
        f"{status.embedded:,} texts embedded"
        if status.embedded and not status.completion_tokens
        else f"{status.completion_tokens:,} output tokens"
    )
    return (
        f"{status.succeeded:,} succeeded, {status.failed:,} failed, "
        f"{made} in {duration(job_seconds(status))}"
        + (f" over {status.runs} runs." if status.runs > 1 else ".")
    )


def reused_text(status: JobStatus) -> str:
    """What reuse saved the job ("" when nothing was reused)."""
    if not status.reused:
        return ""
    share = status.reused / status.total if status.total else 0.0
    return (
        f"{status.reused:,} answers ({share:.0%}) came from earlier results or from the same "
        f"request earlier in the file: {status.reused_completion_tokens:,} output tokens "
        "not computed."
    )
