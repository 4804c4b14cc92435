"""The app's pages and its script: what app.py runs, and what a page runs when it was
opened without app.py.

Streamlit runs a freshly started server's first page the old way of a ``pages/`` folder
(the page's file alone, app.py not run, a sidebar of every file) until ``st.navigation``
has been called once in the process. A page opened by its address in that first run calls
:func:`run_inside_app`, which runs the app's script inside it (sign-in, navigation, then this
same page, with the widgets' values of this run) and stops the outer run: no page is ever
drawn past the app's sign-in. AppTest starts every run that way, so the page tests go the
same path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import streamlit as st

from ui.sign_in import guard

# The icon is a file of ours: a :material/...: page icon is fetched from Google's servers,
# and the studio runs offline.
FAVICON = Path(__file__).parent.parent / "assets" / "favicon.png"

# True while the app's script runs (its navigation runs the page inside it).
_in_app: ContextVar[bool] = ContextVar("in_app", default=False)


def app_pages() -> list[st.Page]:
    """The studio's pages, in the order of the navigation; Upload & check opens first."""
    return [
        st.Page("pages/build.py", title="Build", icon=":material/construction:"),
        st.Page(
            "pages/upload.py", title="Upload & check", icon=":material/upload_file:", default=True
        ),
        st.Page("pages/run.py", title="Run", icon=":material/play_circle:"),
        st.Page("pages/monitor.py", title="Monitor", icon=":material/speed:"),
        st.Page("pages/results.py", title="Results", icon=":material/table_view:"),
        st.Page("pages/review.py", title="Review", icon=":material/rate_review:"),
        st.Page("pages/checks.py", title="Checks", icon=":material/fact_check:"),
        st.Page("pages/dashboards.py", title="Dashboards", icon=":material/monitoring:"),
        st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
        st.Page("pages/experiments.py", title="Experiments", icon=":material/science:"),
        st.Page("pages/jobs.py", title="Jobs", icon=":material/list_alt:"),
        st.Page("pages/settings.py", title="Settings", icon=":material/settings:"),
    ]


@contextmanager
def _app_running() -> Iterator[None]:
    token = _in_app.set(True)
    try:
        yield
    finally:
        _in_app.reset(token)


def run_app() -> None:
    """The app's script: page settings, the sign-in guard, then the page asked for."""
    with _app_running():
        st.set_page_config(page_title="Batch Studio", page_icon=str(FAVICON), layout="wide")
        st.session_state["signed_in_user"] = guard()  # stops here for who may not come in
        st.navigation(app_pages()).run()


def run_inside_app() -> None:
    """Runs the app's script around this page where the page was opened without it (see
    the module's docstring), then stops this outer run; does nothing inside the app."""
    if not _in_app.get():
        run_app()
        st.stop()
