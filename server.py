"""The studio's one server: the pages (app.py) and OpenAI's Batch API under ``/v1``, on
one host and port, in one process (``python -m core serve`` runs ``streamlit run server.py``).

Streamlit finds ``app`` (an ``st.App``) here and serves it with uvicorn; ``app.py`` stays
the pages' script, run per session as before.
"""

import gc

import streamlit as st

from core.api.media import media_sign_in
from core.api.paths import api_paths
from core.api.polls import batch_polls
from core.api.routes import api_routes

# app.py names its pages (st.navigation); a page opened before app.py has run once in this
# process runs the app's script inside it (ui/navigation.py).
app = st.App(
    "app.py", routes=api_routes(), middleware=[batch_polls(), api_paths(), media_sign_in()]
)

# A full collection walks every object the imports above made (about 100,000: 80-700 ms
# measured with the machine loaded), with the event loop stopped and every poll waiting;
# frozen, they are never walked again (they live as long as the server does anyway).
gc.freeze()
