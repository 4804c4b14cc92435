"""Who may come in (core/access.py's rules), who is signed in, and who labels."""

from __future__ import annotations

import getpass
import json
from urllib.parse import quote, unquote

import streamlit as st

from core.access import AccessConfig, access_of, allowed, exposure_problem, open_override
from core.human.owners import Who, signed_in
from ui.text import escape


def guard() -> str | None:
    """Lets in only who may use the studio (see core/access.py); returns the signed-in
    user's name, or None where sign-in is not configured (use on this machine)."""
    sign_in = _secret("auth") is not None
    problem = exposure_problem(st.get_option("server.address"), sign_in, open_override())
    if problem:
        st.error(problem, icon="⛔")
        st.stop()
    if not sign_in:
        return None
    if not st.user.is_logged_in:
        st.title("Batch Studio")
        st.write("Sign in to use the studio.")
        st.button("Sign in", type="primary", on_click=st.login)
        st.stop()
    email = str(st.user.get("email") or "")
    if not allowed(email, list((_secret("access") or {}).get("allowed_users", []))):
        st.error(
            f"{escape(email or 'This account')} may not use this studio; ask its "
            "administrator to add you to the allow-list.",
            icon="⛔",
        )
        st.button("Sign out", on_click=st.logout)
        st.stop()
    st.session_state["signed_in_email"] = email  # who approves (core/jobs/approval.py)
    name = str(st.user.get("name") or email)
    with st.sidebar:
        st.caption(f"Signed in as {escape(name)}")
        st.button("Sign out", on_click=st.logout, key="sign_out")
    return name


def _secret(section: str) -> dict | None:
    """A section of Streamlit's secrets, or None (also when there is no secrets file)."""
    try:
        return dict(st.secrets[section]) if section in st.secrets else None
    except FileNotFoundError:
        return None


def signed_in_user() -> str | None:
    """The signed-in user's name (set by app.py through :func:`guard`)."""
    return st.session_state.get("signed_in_user")


REVIEWER_COOKIE = "batch_studio_reviewer"
YEAR = 365 * 24 * 3600


def reviewer_name(label: str) -> str:
    """Who labels: the signed-in user where sign-in is on (not editable), else a name typed
    once and remembered by this browser (a cookie: a queue's reviewer finds their share
    again tomorrow, in a new tab)."""
    user = signed_in_user()
    if user is not None:
        st.text_input(label, value=user, disabled=True, key="reviewer_signed_in")
        return user
    # A widget's state is dropped when its page is left: the name is kept apart, restored;
    # a new session starts from the browser's cookie.
    remembered = st.session_state.get("reviewer_name") or _remembered()
    if "reviewer" not in st.session_state and remembered:
        st.session_state["reviewer"] = remembered
    name = st.text_input(label, key="reviewer").strip()
    st.session_state["reviewer_name"] = name
    if name and st.session_state.get("reviewer_cookie") != name:
        _remember(name)
        st.session_state["reviewer_cookie"] = name
    return name


def _remembered() -> str:
    """The name this browser's cookie holds ("" without one; AppTest has no browser)."""
    value = st.context.cookies.get(REVIEWER_COOKIE)
    return unquote(value) if isinstance(value, str) else ""


def _remember(name: str) -> None:
    """Sets the reviewer cookie in the browser. The name goes in percent-encoded, so the
    script holds only letters, digits and ``%_.-~``: nothing a name could break out with."""
    cookie = f"{REVIEWER_COOKIE}={quote(name, safe='')}; path=/; max-age={YEAR}; SameSite=Lax"
    st.html(
        f"<script>document.cookie = {json.dumps(cookie)};</script>", unsafe_allow_javascript=True
    )


def access_now() -> AccessConfig:
    """Sign-in, the allow-list and the admins as Streamlit's secrets say."""
    return access_of(_secret("auth") is not None, _secret("access"))


def sample_user() -> tuple[Who, bool]:
    """Who changes a sample here (the signed-in email, an admin or not; this machine's user
    without sign-in) and whether sign-in is on: what ``core.human.owners``' rules take."""
    access = access_now()
    return signed_in(st.session_state.get("signed_in_email"), access), access.sign_in


def new_sample_owner() -> str | None:
    """Who owns a sample drawn here: the signed-in email where sign-in is on, else nobody
    (``core.human.owners``: a sample without an owner stays open to everyone)."""
    who, sign_in = sample_user()
    return who.user if sign_in else None


def deciding_user() -> str:
    """Who approves or rejects a job here: the signed-in email, else this machine's user."""
    return st.session_state.get("signed_in_email") or getpass.getuser()
