"""What every page shares: the store (one DuckDB connection per UI process) and paths."""

from __future__ import annotations

import streamlit as st

from core.config import DataPaths, data_paths
from core.store import Store


@st.cache_resource
def _open_store(path: str) -> Store:
    return Store(path)


def store() -> Store:
    """The process's one DuckDB store for the current data folder."""
    return _open_store(str(data_paths().database))


def paths() -> DataPaths:
    return data_paths()
