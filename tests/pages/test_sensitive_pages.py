"""Upload & check shows sensitive data found in the prompts (issue 42 item 1)."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.check.sensitive import read_policy
from core.config import REPO_ROOT


def test_upload_and_check_shows_the_counts_and_lines_as_text(studio_home: Path) -> None:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/upload.py").run()
    at.radio(key="source").set_value("A file on the server").run()
    at.text_input(key="server_path").set_value(
        str(REPO_ROOT / "tests" / "sensitive" / "planted.jsonl")
    ).run()
    assert not at.exception, [e.message for e in at.exception]
    shown = [t.value for t in at.text]
    assert "payment card number: 1 on 1 lines (line 3 **** **** **** 4242)" in shown
    assert "credential: 2 on 2 lines (line 6 AKIA***, line 8 ghp_***)" in shown
    assert not any("4242 4242 4242 4242" in text for text in shown)


def test_settings_keeps_the_policy_that_the_check_then_keeps(studio_home: Path) -> None:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/settings.py").run()
    assert at.radio(key="sensitive").value == "warn"
    at.radio(key="sensitive").set_value("refuse").run()
    at.button(key="save_sensitive").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert read_policy(studio_home).policy == "refuse"
    at.switch_page("pages/upload.py").run()
    at.radio(key="source").set_value("A file on the server").run()
    at.text_input(key="server_path").set_value(
        str(REPO_ROOT / "tests" / "sensitive" / "planted.jsonl")
    ).run()
    refusals = [e.value for e in at.error]
    assert any("remove it from lines 1, 2, 3, 4, 5, 6, 8" in text for text in refusals)


def test_settings_keeps_owners_own_policies_and_names_a_wrong_line(studio_home: Path) -> None:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/settings.py").run()
    at.text_area(key="sensitive_owners").set_value("alice = redact\nbob = maybe").run()
    at.button(key="save_sensitive_owners").click().run()
    # Shown escaped (text, never markdown): the line and what is wrong with it.
    assert any("line 2" in e.value and "maybe" in e.value for e in at.error)
    assert read_policy(studio_home).owners == {}  # nothing half-set
    at.text_area(key="sensitive_owners").set_value("alice = redact\nbob = refuse").run()
    at.button(key="save_sensitive_owners").click().run()
    assert not at.exception, [e.message for e in at.exception]
    kept = read_policy(studio_home)
    assert kept.owners == {"alice": "redact", "bob": "refuse"} and kept.policy == "warn"
    assert (kept.of("alice"), kept.of("carol")) == ("redact", "warn")


def test_settings_keeps_the_phone_region_beside_the_policy(studio_home: Path) -> None:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/settings.py").run()
    region = at.selectbox(key="phone_region")
    assert region.value == "US" and "DE (Germany)" in region.options and "XK" in region.options
    region.set_value("DE").run()
    at.button(key="save_phone_region").click().run()
    assert not at.exception, [e.message for e in at.exception]
    kept = read_policy(studio_home)
    assert (kept.phone_region, kept.policy) == ("DE", "warn")
    assert at.selectbox(key="phone_region").value == "DE"
