"""Settings: where data and models live, and the model folders found."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from core.api.keys import read_keys as api_keys
from core.config import default_model_dir, models_dir
from core.devices import gpu_count
from core.model_folders import is_model_folder, model_folders
from pages.shared import paths, through_app

through_app()
st.title("Settings")

data = paths()
st.subheader("Folders")
st.dataframe(
    pd.DataFrame(
        [
            {"what": "Data folder (BATCH_STUDIO_HOME)", "path": str(data.home)},
            {"what": "Jobs", "path": str(data.jobs)},
            {"what": "Uploads", "path": str(data.uploads)},
            {"what": "DuckDB index", "path": str(data.database)},
            {"what": "Models folder (BATCH_STUDIO_MODELS)", "path": str(models_dir())},
        ]
    ),
    hide_index=True,
    width="stretch",
)
st.caption("Set the environment variables before `make run` to move these folders.")

st.subheader("Models")
gpus = gpu_count()
st.write(f"{gpus} GPU(s) found." if gpus else "No GPU found: jobs run on the CPU build of vLLM.")
rows = [
    {
        "model": f.name,
        "folder": str(f),
        "ready": is_model_folder(f),
        "built-in": f == default_model_dir(),
    }
    for f in model_folders()
]
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
if not is_model_folder(default_model_dir()):
    st.warning(
        "The built-in model is not prepared yet: run `make setup` (or "
        "`python -m core models prepare`)."
    )
st.caption(
    "Put any Hugging Face model folder (config, weights, tokenizer) under the models "
    "folder to see it here, or give its path on the Run page."
)

st.subheader("API keys")
keys = api_keys(data.home)
if keys:
    st.dataframe(
        pd.DataFrame(
            [
                {"name (owner)": k.name, "key starts": f"{k.hint}…", "created": k.created_at}
                for k in keys
            ]
        ),
        hide_index=True,
        width="stretch",
    )
else:
    st.write("No API keys: the Batch API (`/v1`) answers only callers on this machine.")
st.caption(
    "OpenAI clients call this server's `/v1` (Files, Batches, Models). Beyond this machine "
    "they need a key: `python -m core keys create NAME` prints one once (only its hash is "
    "kept), `keys revoke NAME` removes it. A key sees only its own files and batches."
)
