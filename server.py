"""The studio's one server: the pages (app.py) and OpenAI's Batch API under ``/v1``, on
one host and port, in one process (``python -m core serve`` runs ``streamlit run server.py``).

Streamlit finds ``app`` (an ``st.App``) here and serves it with uvicorn; ``app.py`` stays
the pages' script, run per session as before.
"""

import streamlit as st

from core.api.media import media_sign_in
from core.api.routes import api_routes

app = st.App("app.py", routes=api_routes(), middleware=[media_sign_in()])
