"""Sample owners on Review (issue 44), sign-in on: who drew a sample owns it and edits its
schema; another signed-in reviewer sees the schema and queue read-only with the reason;
an admin edits it and may name another owner."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.support.pages import APP, TIMEOUT, job_in_home, shown

READ_ONLY = (
    "Read-only: only this sample's owner (ana@example.com) or an admin may change its "
    "schema, guidelines and queue, or set final labels."
)


def _signed_in(email: str) -> AppTest:
    """Review opened by ``email``, signed in (sign-in on, everyone at example.com let in,
    boss@example.com the admin)."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.secrets["auth"] = {"redirect_uri": "http://localhost:8501/oauth2callback"}
    at.secrets["access"] = {"allowed_users": ["@example.com"], "admins": ["boss@example.com"]}
    at.user = {"is_logged_in": True, "email": email, "name": email.split("@")[0]}
    at.run()
    at.switch_page("pages/review.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def _button(at, label):
    return next(b for b in at.button if b.label == label)


def _questions_box(at):
    return next(t for t in at.text_area if t.label.startswith("Questions, one a line"))


def test_the_owner_edits_the_schema_another_reviewer_sees_it_read_only_an_admin_edits(
    studio_home,
):
    job_in_home(studio_home)
    ana = _signed_in("ana@example.com")
    ana.text_input(key="sample_name").set_value("check")
    _button(ana, "Draw sample").click().run()
    assert not ana.exception
    assert "Owner: ana@example.com" in [shown(c.value) for c in ana.caption]
    _questions_box(ana).set_value("rating: Quality | 1..5")
    _button(ana, "Save the schema").click().run()
    assert not ana.exception
    assert _questions_box(ana).value == "rating: Quality | 1..5"  # saved: the owner may
    assert not _questions_box(ana).disabled
    assert READ_ONLY not in [shown(c.value) for c in ana.caption]
    assert not [e for e in ana.expander if e.label == "Name the owner (admins)"]

    bob = _signed_in("bob@example.com")
    assert not bob.exception
    captions = [shown(c.value) for c in bob.caption]
    assert captions.count(READ_ONLY) == 2, captions  # the queue's and the schema's
    assert _questions_box(bob).disabled and _questions_box(bob).value == "rating: Quality | 1..5"
    assert _button(bob, "Save the schema").disabled and _button(bob, "Save the queue").disabled
    assert not [e for e in bob.expander if e.label == "Name the owner (admins)"]
    assert bob.button(key="review_rating_3").label == "3"  # he still labels by its questions

    boss = _signed_in("boss@example.com")
    assert READ_ONLY not in [shown(c.value) for c in boss.caption]
    assert not _questions_box(boss).disabled
    owner_box = next(t for t in boss.text_input if t.label == "Owner's sign-in email")
    owner_box.set_value("bob@example.com")
    _button(boss, "Set the owner").click().run()
    assert not boss.exception
    assert "Owner: bob@example.com" in [shown(c.value) for c in boss.caption]

    bob = _signed_in("bob@example.com")  # now his
    assert not _questions_box(bob).disabled
    assert READ_ONLY not in [shown(c.value) for c in bob.caption]
