"""Widget values kept for the session across pages (Streamlit drops a widget's state
when its page is left)."""

from __future__ import annotations

from typing import Any

import streamlit as st


def remembered(key: str, default: Any) -> Any:
    """What a widget held when its page was last left (Streamlit drops a widget's state
    then), else ``default``: pass it as the widget's default, then :func:`remember` its value."""
    return st.session_state.get(f"kept::{key}", default)


def remember(key: str, value: Any) -> Any:
    st.session_state[f"kept::{key}"] = value
    return value


def remembered_input(widget: Any, label: str, default: Any, key: str, **options: Any) -> Any:
    """A text input, text area, number input or checkbox (``widget``, e.g. ``st.text_input``
    or a column's) whose value is kept for the session, also when its page is left."""
    return remember(key, widget(label, value=remembered(key, default), key=key, **options))
