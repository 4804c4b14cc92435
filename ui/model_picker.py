"""The one model picker of every page: a model folder from a list, or one typed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import streamlit as st

from core.model_folders import model_folders

OTHER_FOLDER = "Another folder…"


def model_picker(
    label: str,
    key: str,
    *,
    path_key: str | None = None,
    path_label: str = "Model folder",
    folders: Sequence[str | Path] | None = None,
    preferred: str | None = None,
) -> str:
    """A model folder: the built-in one and those under the models folder (or ``folders``,
    in that order), ``preferred`` chosen first where it is one of them. With ``path_key``,
    "Another folder…" is offered too, and then a text input (``path_label``) gives the path.
    Returns the folder chosen or typed (stripped; empty while nothing is typed)."""
    options = [str(f) for f in (model_folders() if folders is None else folders)]
    if path_key is not None:
        options.append(OTHER_FOLDER)
    choice = st.selectbox(
        label,
        options,
        index=options.index(preferred) if preferred in options else 0,
        format_func=lambda p: Path(p).name or p,
        key=key,
    )
    if choice == OTHER_FOLDER and path_key is not None:
        return st.text_input(path_label, key=path_key).strip()
    return choice
