"""The UI process's one DuckDB store (its watchers started) and what every page says of it."""

from __future__ import annotations

import streamlit as st

from core.config import DataPaths, data_paths
from core.store.db import Store, StoreLocked
from ui.navigation import run_inside_app
from ui.text import escape


def through_app() -> None:
    """Makes sure this page runs inside app.py's script (call it first on each page; see
    :mod:`ui.navigation`), then opens the store and shows what every page must say of it
    (:func:`store_notices`)."""
    run_inside_app()
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
