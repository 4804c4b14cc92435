"""The command line's answers to bad input (no engine needed)."""

import json
import subprocess
import sys

import pytest

from core.config import REPO_ROOT, SAMPLE_DATA
from tests.support.cli import cli

# Every command runs on a scratch data folder, never the checkout's own data/.
pytestmark = pytest.mark.usefixtures("studio_home")
BROKEN = SAMPLE_DATA / "broken_batch.jsonl"


def test_check_prints_numbered_problems_and_fails():
    result = cli("check", str(BROKEN))
    assert result.returncode == 1
    assert "11 lines, 4 valid, 7 invalid" in result.stdout
    assert "line 3: error: not valid JSON" in result.stdout
    assert "line 10: error: messages[0].role is 'robot'" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_check_json_report_is_machine_readable():
    result = cli("check", str(SAMPLE_DATA / "review_sentiment.jsonl"), "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0
    assert report["ok"] is True and report["valid"] == 16


def test_check_loads_no_store_library():
    """``core check`` needs no DuckDB store: building the command line's parser (every
    ``python -m core`` command does) and checking a file load neither pandas, pyarrow nor
    DuckDB, which cost each command about 0.3 s of CPU before it read a line."""
    probe = (
        "import sys\n"
        "from core.cli.main import main\n"
        f"code = main(['check', '--no-tokens', {str(SAMPLE_DATA / 'review_sentiment.jsonl')!r}])\n"
        "print(code, sorted({'pandas', 'pyarrow', 'duckdb'} & set(sys.modules)))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "16 lines, 16 valid" in run.stdout  # it did check the file
    assert run.stdout.splitlines()[-1] == "0 []"


def test_check_of_an_empty_file_says_it_is_empty(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    result = cli("check", str(empty))
    assert result.returncode == 1
    assert "file: error: the file has no request lines" in result.stdout


def test_check_of_a_missing_file_is_a_usage_error(tmp_path):
    result = cli("check", str(tmp_path / "nope.jsonl"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_run_refuses_invalid_lines_unless_told_to_skip(studio_home, tmp_path):
    result = cli("run", str(BROKEN), "-o", str(tmp_path / "out.jsonl"), "--model", str(tmp_path))
    assert result.returncode == 2  # the model folder is checked first: not a model
    assert "has no config.json" in result.stderr
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    result = cli("run", str(BROKEN), "-o", str(tmp_path / "out.jsonl"), "--model", str(model))
    assert result.returncode == 1
    assert "repeat a custom_id of an earlier line" in result.stderr
    assert "line 6: custom_id 'ticket-summary:T-5001' repeats line 1" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
    assert not (studio_home / "jobs").exists() or not any((studio_home / "jobs").iterdir())


def test_run_without_skip_invalid_names_the_way_out(studio_home, tmp_path, default_model):
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"custom_id": "a"}\n')
    result = cli("run", str(batch), "-o", str(tmp_path / "out.jsonl"))
    assert result.returncode == 1
    assert "line 1: error: method must be 'POST'" in result.stdout
    assert "fix them, or skip them (--skip-invalid" in result.stderr
