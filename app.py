"""Batch Studio: the Streamlit entry point (``streamlit run app.py``)."""

import streamlit as st

from pages.shared import guard

st.set_page_config(page_title="Batch Studio", page_icon=":material/stacks:", layout="wide")
st.session_state["signed_in_user"] = guard()  # stops here for a visitor who may not come in

pages = [
    st.Page("pages/build.py", title="Build", icon=":material/construction:"),
    st.Page("pages/upload.py", title="Upload & check", icon=":material/upload_file:", default=True),
    st.Page("pages/run.py", title="Run", icon=":material/play_circle:"),
    st.Page("pages/monitor.py", title="Monitor", icon=":material/speed:"),
    st.Page("pages/results.py", title="Results", icon=":material/table_view:"),
    st.Page("pages/review.py", title="Review", icon=":material/rate_review:"),
    st.Page("pages/dashboards.py", title="Dashboards", icon=":material/monitoring:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/jobs.py", title="Jobs", icon=":material/list_alt:"),
    st.Page("pages/settings.py", title="Settings", icon=":material/settings:"),
]
st.navigation(pages).run()
