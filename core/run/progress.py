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
    windows = ""
    if speed.eta_windows:  # the closed hours on the way are waited through
        windows = (
            f" It counts only the open hours of its run windows, {speed.eta_windows}: "
            f"it ends about {speed.eta_ends}."
        )
    if speed.eta_counts == "requests":
        help = "The requests still without a result, at the rate they are finishing now."
        return duration(speed.eta_seconds), help + windows
    if speed.eta_is_bound:
        help = (
            "At most: no answer of this model was measured yet, so every answer is taken "
            "to reach its max_tokens. Later runs use the measured lengths."
        )
        return f"≤ {duration(speed.eta_seconds)}", help + windows
    help = "The output still expected (measured answer lengths under each line's limit) at "
    help += "the current speed."
    return duration(speed.eta_seconds), help + windows


def earlier_tokens(status: JobStatus) -> int:
    """Output tokens of the job's answers this run did not generate: earlier runs' and
    reused answers'."""
    return max(status.completion_tokens - status.run_completion_tokens, 0)


def work_text(work_done: float, status: JobStatus) -> str:
    """The share of this run's output generated, against the total it is measured on (the
    tokens of earlier runs' and reused answers are not this run's, and said apart)."""
    earlier = earlier_tokens(status)
    expected = max((status.expected_output_tokens or 0) - earlier, 0)
    if status.expected_is_bound:  # no answer measured: every answer taken to its limit
        text = f"{work_done:.0%} of at most {expected:,} output tokens generated"
    else:
        text = f"{work_done:.0%} of about {expected:,} expected output tokens generated"
    if earlier:
        text += f" (this run's; {earlier:,} more from earlier runs or reused answers)"
    return text


def speed_figures(status: JobStatus, speed: Rates, final: bool) -> list[tuple[str, str, str]]:
    """Monitor's two speed metrics as ``(label, value, help)``: requests/s, and output
    tokens/s (texts embedded/s for a job of embeddings only). They are this run's: after a
    resume the label says so. While the run has generated but no speed is measured yet,
    the value says so rather than 0."""
    scope = " (this run)" if status.runs > 1 else ""
    kind = " (average)" if final else ""
    generated = status.generated_tokens > earlier_tokens(status)  # by this run
    measuring = not final and speed.tokens_per_s == 0 and generated
    requests = (
        f"Requests/s{kind}{scope}",
        f"{speed.requests_per_s:.2f}",
        f"average {speed.average_requests_per_s:.2f}",
    )
    if status.embedded and not status.completion_tokens:  # a job of embeddings only
        return [
            requests,
            (
                f"Texts embedded/s{kind}{scope}",
                f"{speed.texts_per_s:.0f}",
                f"average {speed.average_texts_per_s:.0f}; {status.embedded:,} texts so far",
            ),
        ]
    tokens = (
        f"Output tokens/s{kind}{scope}",
        "measuring" if measuring else f"{speed.tokens_per_s:.0f}",
        f"average {speed.average_tokens_per_s:.0f}; since the first token, running "
        "requests' tokens counted as the engine generates them; reused answers' tokens are "
        "not counted",
    )
    return [requests, tokens]


def runs_text(status: JobStatus) -> str:
    """What the figures of a job with several runs cover ("" for one run)."""
    if status.runs <= 1:
        return ""
    return (
        f"Requests done, Succeeded, Failed and Elapsed are the whole job's, over its "
        f"{status.runs} runs; the speeds and the ETA are this run's: "
        f"{plural(status.run_done, 'result')}, "
        f"{plural(status.run_completion_tokens, 'output token')} "
        f"in {duration(status.elapsed_seconds)}."
    )


def plural(n: int, noun: str) -> str:
    """``1 answer``, ``2 answers``, with thousands separated."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


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
    """A finished job's counts, what it made and how long it took, as one sentence; reused
    answers' tokens are said apart, as not made by the job's runs."""
    reused = status.reused_completion_tokens
    if status.embedded and not status.completion_tokens:  # vectors, not tokens
        made = f"{status.embedded:,} texts embedded"
    elif reused:
        made = (
            f"{plural(status.completion_tokens - reused, 'output token')} generated and "
            f"{reused:,} reused from earlier answers"
        )
    else:
        made = plural(status.completion_tokens, "output token")
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
        f"{plural(status.reused, 'answer')} ({share:.0%}) came from earlier results or from "
        f"the same request earlier in the file: "
        f"{plural(status.reused_completion_tokens, 'output token')} not computed."
    )
