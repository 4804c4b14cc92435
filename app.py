"""Batch Studio: the pages' Streamlit script (served by server.py, or ``streamlit run app.py``).

The pages and the sign-in guard they all pass are in ``ui/navigation.py``.
"""

from ui.navigation import run_app

run_app()
