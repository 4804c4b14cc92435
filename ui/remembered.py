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
    value = afresh(key, remembered(key, default))
    return remember(key, widget(label, value=value, key=key, **options))


def forget(keys: tuple[str, ...]) -> None:
    """The widgets of ``keys`` start again from their defaults, in the browser too (call
    :func:`afresh` before drawing each: :func:`remembered_input` does)."""
    for key in keys:
        st.session_state.pop(key, None)
        st.session_state.pop(f"kept::{key}", None)
        st.session_state[f"afresh::{key}"] = True


def afresh(key: str, default: Any) -> Any:
    """``default``, set as the widget's value when it was forgotten: a browser keeps what
    a widget shows, and sends it back, until the server sets the value through the session
    state (dropping it on the server alone leaves the old value in the form)."""
    if st.session_state.pop(f"afresh::{key}", False):
        st.session_state[key] = default
    return default
