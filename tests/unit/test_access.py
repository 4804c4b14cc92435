"""Who may come in: sign-in with OpenID Connect, an allow-list, no open network by default.

The browser tests start a real OpenID Connect provider (``oidc-provider-mock``) on this
machine and sign in through its form, as a user would.
"""

from __future__ import annotations

from core.access import allowed, exposure_problem, is_loopback, sign_in_configured
from core.config import data_paths
from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig
from tests.support.browser import free_port
from tests.support.cli import run_cli
from tests.support.jobs import request_line


def test_the_allow_list_admits_listed_emails_and_whole_domains_only():
    users = ["alice@example.com", "@team.example"]
    assert allowed("Alice@Example.com", users)
    assert allowed("bob@team.example", users)
    assert not allowed("bob@example.com", users)
    assert not allowed("mallory@evil-team.example.org", users)
    assert not allowed("", users) and not allowed("alice@example.com", [])


def test_only_loopback_is_served_without_sign_in():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback(None) and not is_loopback("10.1.2.3")
    assert exposure_problem("127.0.0.1", sign_in=False, open_override=False) is None
    assert "will not serve on 0.0.0.0" in exposure_problem("0.0.0.0", False, False)
    assert exposure_problem("0.0.0.0", sign_in=True, open_override=False) is None
    assert exposure_problem("0.0.0.0", sign_in=False, open_override=True) is None
    assert "every network interface" in exposure_problem(None, False, False)


def test_sign_in_is_read_from_a_secrets_file_with_an_auth_section(tmp_path):
    secrets_file = tmp_path / "secrets.toml"
    assert not sign_in_configured((secrets_file,))
    secrets_file.write_text("[other]\nx = 1\n")
    assert not sign_in_configured((secrets_file,))
    secrets_file.write_text('[auth]\nclient_id = "x"\n')
    assert sign_in_configured((secrets_file,))


def test_serve_refuses_an_open_address_without_sign_in(studio_home):
    result = run_cli("serve", "--host", "0.0.0.0", "--port", str(free_port()))
    assert result.returncode == 2
    assert "will not serve on 0.0.0.0 without sign-in" in result.stderr


def test_a_job_records_its_owner(studio_home, tmp_path, monkeypatch):
    monkeypatch.setattr("core.jobs.submit.start_worker", lambda job, **kw: None)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    batch = tmp_path / "b.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    submission = Submission(engine=EngineConfig(model=str(model)), owner="Alice")
    job = submit(batch, submission, data_paths().jobs).job
    assert job.read_spec().provenance["owner"] == "Alice"
