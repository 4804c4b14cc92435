"""Batch Studio: the pages' Streamlit script (served by server.py, or ``streamlit run app.py``)."""

from pathlib import Path

import streamlit as st

from ui.sign_in import guard

# The icon is a file of ours: a :material/...: page icon is fetched from Google's servers,
# and the studio runs offline.
FAVICON = Path(__file__).parent / "assets" / "favicon.png"
st.set_page_config(page_title="Batch Studio", page_icon=str(FAVICON), layout="wide")
st.session_state["signed_in_user"] = guard()  # stops here for a visitor who may not come in

pages = [
    st.Page("pages/build.py", title="Build", icon=":material/construction:"),
    st.Page("pages/upload.py", title="Upload & check", icon=":material/upload_file:", default=True),
    st.Page("pages/run.py", title="Run", icon=":material/play_circle:"),
    st.Page("pages/monitor.py", title="Monitor", icon=":material/speed:"),
    st.Page("pages/results.py", title="Results", icon=":material/table_view:"),
    st.Page("pages/review.py", title="Review", icon=":material/rate_review:"),
    st.Page("pages/checks.py", title="Checks", icon=":material/fact_check:"),
    st.Page("pages/dashboards.py", title="Dashboards", icon=":material/monitoring:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/jobs.py", title="Jobs", icon=":material/list_alt:"),
    st.Page("pages/settings.py", title="Settings", icon=":material/settings:"),
]
st.navigation(pages).run()
