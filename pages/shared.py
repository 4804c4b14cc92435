"""What every page shares: the store (one DuckDB connection per UI process) and paths."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from core.access import allowed, exposure_problem, open_override
from core.config import DataPaths, data_paths, page_wait_seconds
from core.jobs.folder import JobFolder, JobUnreadable, cancel
from core.jobs.ledger import summary as ledger_summary
from core.jobs.submit import Refused, resubmit
from core.plan.estimate import format_duration, load_note
from core.plan.pricing import format_money
from core.recent import PENDING, Latest
from core.schemas import job_label as label_of
from core.store.db import Store, StoreLocked
from core.store.results import conversation


def guard() -> str | None:
    """Lets in only who may use the studio (see core/access.py); returns the signed-in
    user's name, or None where sign-in is not configured (use on this machine)."""
    sign_in = _secret("auth") is not None
    problem = exposure_problem(st.get_option("server.address"), sign_in, open_override())
    if problem:
        st.error(problem, icon="⛔")
        st.stop()
    if not sign_in:
        return None
    if not st.user.is_logged_in:
        st.title("Batch Studio")
        st.write("Sign in to use the studio.")
        st.button("Sign in", type="primary", on_click=st.login)
        st.stop()
    email = str(st.user.get("email") or "")
    if not allowed(email, list((_secret("access") or {}).get("allowed_users", []))):
        st.error(
            f"{escape(email or 'This account')} may not use this studio; ask its "
            "administrator to add you to the allow-list.",
            icon="⛔",
        )
        st.button("Sign out", on_click=st.logout)
        st.stop()
    name = str(st.user.get("name") or email)
    with st.sidebar:
        st.caption(f"Signed in as {escape(name)}")
        st.button("Sign out", on_click=st.logout, key="sign_out")
    return name


def _secret(section: str) -> dict | None:
    """A section of Streamlit's secrets, or None (also when there is no secrets file)."""
    try:
        return dict(st.secrets[section]) if section in st.secrets else None
    except FileNotFoundError:
        return None


def signed_in_user() -> str | None:
    """The signed-in user's name (set by app.py through :func:`guard`)."""
    return st.session_state.get("signed_in_user")


def reviewer_name(label: str) -> str:
    """Who labels: the signed-in user where sign-in is on (not editable), else a name typed
    once and kept for the session."""
    user = signed_in_user()
    if user is not None:
        st.text_input(label, value=user, disabled=True, key="reviewer_signed_in")
        return user
    # A widget's state is dropped when its page is left: the name is kept apart, restored.
    if "reviewer" not in st.session_state and st.session_state.get("reviewer_name"):
        st.session_state["reviewer"] = st.session_state["reviewer_name"]
    name = st.text_input(label, key="reviewer").strip()
    st.session_state["reviewer_name"] = name
    return name


def kept(key: str, default: Any) -> Any:
    """What a widget held when its page was last left (Streamlit drops a widget's state
    then), else ``default``: pass it as the widget's default, then :func:`keep` its value."""
    return st.session_state.get(f"kept::{key}", default)


def keep(key: str, value: Any) -> Any:
    st.session_state[f"kept::{key}"] = value
    return value


def drafted(widget: Any, label: str, default: Any, key: str, **options: Any) -> Any:
    """A text input, text area, number input or checkbox (``widget``, e.g. ``st.text_input``
    or a column's) whose value is kept for the session, also when its page is left."""
    return keep(key, widget(label, value=kept(key, default), key=key, **options))


def forget_upload(uploaded: Any) -> None:
    """Drops Streamlit's in-memory copy of an uploaded file once it is saved to disk.

    Streamlit keeps each upload's bytes in the server's memory for the whole session (300
    MB kept about 900 MB): in its upload manager and in the widget's values. The manager's
    copy goes here (as Streamlit's own chat input does with its files) and the value given
    to the page is closed; the widget's own copy of its value goes with the widget, which
    the page then replaces by a new one (pages/upload.py).
    """
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    manager = getattr(ctx, "uploaded_file_mgr", None)
    if isinstance(manager, MemoryUploadedFileManager):
        manager.remove_file(session_id=ctx.session_id, file_id=uploaded.file_id)
    uploaded.close()


def show_conversation(container: Any, messages: Any, prompt: str | None = None) -> None:
    """Every turn of a request (the system prompt included), each as plain text."""
    for role, text in conversation(messages, prompt):
        container.caption(escape(role))
        container.text(text)


def through_app() -> None:
    """Makes sure this page runs inside app.py's navigation (call it first on each page),
    then opens the store and shows what every page must say of it (:func:`store_notices`).

    On a freshly started server, Streamlit runs a page opened by its address the old way
    of a ``pages/`` folder (a sidebar of file names, app.py not run) until app.py has run
    once in the process. Turning that mode off and rerunning takes the session through
    app.py to the same page. AppTest, which runs each page as its own script, is left
    alone.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory and "streamlit.testing.v1" not in sys.modules:
        PagesManager.uses_pages_directory = False
        st.rerun()
    store_notices()


def _stop_watchers(observers: list) -> None:
    from core.store.watchers import stop_watchers

    stop_watchers(observers)


# Released (closed, stopped) when the cache is cleared: a watcher holds an inotify instance,
# of which a user has only 128.
@st.cache_resource(on_release=Store.close)
def _open_store(path: str) -> Store:
    return Store(path)


@st.cache_resource(on_release=_stop_watchers)
def _watchers(home: str) -> list:
    """The inbox and job-folder watchers, started once per data folder in this process."""
    from core.qa.grading import refresh_in_background
    from core.store.facets import keep_in_background
    from core.store.watchers import start_watchers

    db = _open_store(str(data_paths().database))

    def after_ingest(job_id: str) -> None:
        """Beside the pages: a job's checks are graded again when its results change, and
        an ended job's filter values are read once for every later visitor."""
        refresh_in_background(db, [job_id], 0)
        keep_in_background(db, job_id)

    return start_watchers(data_paths(), db, after_ingest)


def store() -> Store:
    """The process's one DuckDB store for the current data folder (watchers started)."""
    _watchers(str(data_paths().home))
    return _open_store(str(data_paths().database))


def store_notices() -> None:
    """Opens the store before the page draws anything: a second app on the same data
    folder is told why it cannot run; a database that was set aside and rebuilt, and lines
    of the human-work files that were skipped, are said."""
    try:
        db = store()
    except StoreLocked as exc:
        st.error(
            f"{escape(exc)}. Only one Batch Studio app can use a data folder: open the one "
            "that runs, stop it first, or start this one with another BATCH_STUDIO_HOME. "
            "The command line still reads and exports meanwhile.",
            icon="⛔",
        )
        st.stop()
    if db.set_aside is not None and not st.session_state.get("set_aside_seen"):
        st.warning(
            f"The database could not be read ({escape(db.set_aside_reason)}). It was set "
            f"aside as {escape(db.set_aside.name)} (kept, not deleted) and the index was "
            "rebuilt from the job folders and the files of labels, preferences and samples: "
            "nothing is lost.",
            icon=":material/warning:",
        )
        if st.button("Understood", key="set_aside_seen_button"):
            st.session_state["set_aside_seen"] = True
            st.rerun()
    problems = db.human_problems()
    if problems:
        st.warning(
            f"{len(problems)} line(s) of the files in {escape(db.human_dir)} cannot be read "
            "and are left out; every other label, preference and sample is loaded:",
            icon=":material/warning:",
        )
        st.text(
            "\n".join(problems[:20])
            + (f"\n... and {len(problems) - 20} more" if len(problems) > 20 else "")
        )


@st.cache_resource
def page_values(page: str) -> Latest:
    """What one page computed from the index, kept in this process for every session."""
    return Latest(16)


def following(
    page: str, key: tuple, version: tuple, make: Callable[[], Any], what: str = "these figures"
) -> Any:
    """``make()`` for ``key`` at the index's ``version`` (:meth:`Store.data_version`), kept
    per page and shared by every session. When only results streaming in moved the version
    on (its last item), the last value is shown at once and the next one made in the
    background, and a caption says so. A value not made yet is made in the background too:
    the page waits for it a moment (:func:`core.config.page_wait_seconds`), then gets None,
    says that ``what`` is being computed, and reruns by itself when it is done."""
    index = str(store().path)  # another data folder is another index
    values, kept = page_values(page), (index, key, version[:-1])
    value, current = values.get(kept, version[-1], make, page_wait_seconds())
    if value is PENDING:

        @st.fragment(run_every=1.0)
        def computing() -> None:
            if values.ready(kept):
                st.rerun()  # the whole page, now with the value
            st.caption(f"Computing {what}… they show here as soon as they are done.")

        computing()
        return None
    if not current:
        st.caption(
            "Results are still coming in: these figures are from a moment ago and catch up "
            "in the background (they show on the next click)."
        )
    return value


def jobs_or_stop(empty_message: str) -> pd.DataFrame:
    """The jobs in the store, freshly ingested; or, when there are none, an empty state that
    says what to do first (and the page stops there)."""
    db = store()
    db.ingest_all(paths().jobs)
    unreadable_notice(db.unreadable)
    jobs = db.jobs()
    if jobs.empty:
        st.info(empty_message)
        st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
        st.stop()
    return jobs


def job_labels() -> Callable[[str], str]:
    """The ``format_func`` of every selectbox and multiselect of job ids: a job's name and
    the end of its id, or its id alone (``core.schemas.job_label``). Names come from the
    index in one read; a job not indexed yet is read from its folder. Labels are plain
    text for a widget: pass one through :func:`escape` before it goes into markdown."""
    names = store().job_names()

    def label(job_id: str) -> str:
        name = names.get(job_id)
        if name is None:
            try:
                name = JobFolder(paths().jobs / Path(job_id).name).name
            except JobUnreadable:
                name = ""
        return label_of(job_id, name)

    return label


def job_label(job_id: str) -> str:
    """One job's label (see :func:`job_labels`)."""
    return job_labels()(job_id)


# Every ASCII punctuation mark markdown may read (CommonMark lets each be escaped), and $
# for Streamlit's LaTeX: escaped, a text from a file or a model shows as it is written.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$&=\"'])")


def escape(text: object) -> str:
    """Untrusted text (an id, a file or model name, a message) made safe for a markdown
    sink such as a label, caption or alert: no link, image, HTML or formatting survives.
    Longer texts go to ``st.text`` or ``st.code`` instead, which never read markdown."""
    escaped = _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))
    # A bare address is made a link by GFM even with its punctuation escaped: an invisible
    # word joiner after the scheme's colon (and in www.) keeps it plain text.
    return escaped.replace("\\:", "\\:\u2060").replace("www\\.", "www\u2060\\.")


def paths() -> DataPaths:
    return data_paths()


def unreadable_notice(unreadable: dict[str, str]) -> None:
    """Names the job folders that cannot be read (their reasons shown as plain text)."""
    if unreadable:
        st.warning(
            f"{len(unreadable)} job folder(s) cannot be read and are left out; every other "
            "job works. Fix or remove them:",
            icon=":material/warning:",
        )
        st.text("\n".join(f"job {job_id} is unreadable: {r}" for job_id, r in unreadable.items()))


def open_job(job_id: str) -> JobFolder:
    """The chosen job's folder, read; if it is gone or cannot be read, the page says so
    (the reason as plain text) and stops there."""
    job = JobFolder(paths().jobs / Path(job_id).name)
    if not job.spec_file.is_file():
        st.error(
            "This job's folder is gone; it was removed from the studio.", icon=":material/error:"
        )
        store().ingest_all(paths().jobs)  # forget it
        st.stop()
    reason = job.readable()
    if reason is not None:
        st.error(
            "This job's folder cannot be read; every other job works.", icon=":material/error:"
        )
        st.text(f"job {job.job_id} is unreadable: {reason}")
        st.stop()
    return job


def job_origin(job_id: str) -> None:
    """A caption with the job's owner and batch metadata, where it has any."""
    try:
        origin = JobFolder(paths().jobs / Path(job_id).name).read_spec().origin
    except JobUnreadable:  # open_job says why, where the page opens it
        return
    if origin:
        st.caption(escape(origin))


def jobs_with_metadata(job_ids: list[str], key: str) -> list[str]:
    """A filter of jobs by their batch metadata (``key=value`` pairs, all must hold),
    shown only when some job has metadata; returns the jobs kept, in order."""
    metadata: dict[str, dict[str, str]] = {}
    for job_id in job_ids:
        try:
            metadata[job_id] = JobFolder(paths().jobs / Path(job_id).name).read_spec().metadata
        except JobUnreadable:
            metadata[job_id] = {}
    pairs = sorted({f"{k}={v}" for m in metadata.values() for k, v in m.items()})
    if not pairs:
        return job_ids
    chosen = st.multiselect("Batch metadata (all jobs when empty)", pairs, key=key)
    wanted = [pair.split("=", 1) for pair in chosen]
    return [j for j in job_ids if all(metadata[j].get(k) == v for k, v in wanted)]


def job_controls(job: JobFolder, key: str, retry: bool = True) -> None:
    """Cancel, Resume and Retry-failed buttons, each shown only when it applies (the Jobs
    page has its own rerun of failed, expired and missing requests: ``retry=False``)."""
    status = job.read_status()
    cols = st.columns(3)
    running = not status.is_final and not status.interrupted
    if status.state == "cancelling" and running:
        if cols[0].button(
            "Stop now",
            key=f"stop-{key}",
            icon=":material/cancel:",
            help="Drop the requests still in the engine; a resume runs them.",
        ):
            st.toast(cancel(job, now=True))
    elif running and cols[0].button(
        "Cancel",
        key=f"cancel-{key}",
        icon=":material/stop:",
        help="Start nothing new; the requests in the engine finish and are kept.",
    ):
        st.toast(cancel(job))
    resumable = status.interrupted or (status.state == "cancelled" and status.left)
    if resumable and cols[1].button(
        f"Resume ({status.left:,} to run)",
        key=f"resume-{key}",
        type="primary",
        icon=":material/play_arrow:",
        help="Runs only the requests without a result.",
    ):
        restart(job, retry=False, done="Resumed: only requests without a result run.")
    # Only failures a retry can change (never invalid input or what the engine refused).
    retryable = (
        ledger_summary(job, job.read_spec().shard_size).retryable_failures
        if retry and status.is_final and status.failed
        else 0
    )
    if retryable and cols[2].button(
        f"Retry {retryable:,} failed",
        key=f"retry-{key}",
        icon=":material/replay:",
        help="Reruns the failed requests a retry can change; invalid input and requests "
        "the engine refused fail the same way again, so they are not rerun.",
    ):
        restart(job, retry=True, done="Retrying failed requests (invalid input is never retried).")


def restart(job: JobFolder, *, retry: bool, done: str, shard: int | None = None) -> bool:
    """Resume / retry / rerun through the one way in; shows why when it is refused."""
    try:
        resubmit(job, retry=retry, shard=shard)
    except Refused as refused:
        for problem in refused.problems:
            st.error(escape(problem), icon=":material/block:")
        return False
    st.toast(done)
    return True


def review_sample(sample_id: str) -> None:
    """Moves to the Review page on a sample's first item."""
    st.session_state["sample_id"] = sample_id
    st.session_state["review_pos"] = 0
    st.switch_page("pages/review.py")


def estimate_metrics(estimate: dict) -> None:
    """Input tokens, expected output tokens, time and cost of an estimate (its ``to_dict()``),
    as Upload & check and Run both show them."""
    cols = st.columns(4)
    cols[0].metric("Input tokens", f"{estimate['input_tokens']:,}")
    cols[1].metric(
        "Output tokens (expected)",
        f"{estimate['expected_output_tokens']:,}",
        help=f"At most {estimate['max_output_tokens']:,}",
    )
    notes = [
        load_note(m["model"], m.get("loaded", False), m.get("load_seconds") or 0.0)
        for m in estimate.get("models") or []
    ]
    cols[2].metric(
        "Time", format_duration(estimate["seconds"]), help="; ".join(n for n in notes if n) or None
    )
    cost, currency = estimate["cost"], estimate.get("currency", "USD")
    # "no price" where a model has none (an estimate kept from before cost_text: the amount).
    cols[3].metric("Cost", estimate.get("cost_text") or format_money(cost, currency))


def fresh_checks(job_ids: list[str], label: Callable[[str], str]) -> None:
    """Brings the checks of these jobs up to date from their saved rules, in the background
    (a page never grades a million results while it draws): names saved rules that no
    longer load, and while a grading runs says so and reruns the page when it ends."""
    from core.qa.grading import grading_now, refresh_in_background

    db = store()
    found = refresh_in_background(db, job_ids)
    for job_id, problem in found.problems.items():
        st.warning(f"The saved rules of {escape(label(job_id))} cannot be used:")
        st.text(problem)
    if not found.grading:
        return

    @st.fragment(run_every=1.0)
    def grading_notice() -> None:
        left = grading_now(db, found.grading)
        if not left:
            st.rerun()  # the whole page: its figures read the new outcomes
        st.caption(
            f"Grading… the checks of {', '.join(escape(label(j)) for j in left)} are being "
            "brought up to date from their saved rules; the figures below are the last ones "
            "and change when it is done."
        )

    grading_notice()
