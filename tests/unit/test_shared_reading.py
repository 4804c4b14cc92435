"""Every process can read: the command line works while the app holds the database.

DuckDB lets one process open the file; the command line then reads a private copy brought
up to date from the job folders and the human-work files, and answers the same rows. A
second app on the same data folder says why it cannot run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from core.config import data_paths
from core.qa import grading
from core.qa.rules import load_rules
from core.store.db import Store
from core.store.review import Label, save_label
from tests.support.cli import cli, run_cli
from tests.support.pages import job_in_home

RULES = "rules: [{name: short, type: length, unit: chars, max: 20}]"


def _exports(out: Path, job_id: str, run: Callable = run_cli) -> dict[str, pd.DataFrame]:
    """Runs the reading commands, each in its own process by default (DuckDB locks the file
    against other processes only); returns what each wrote (failing with their stderr)."""
    found = {}
    for what, args in {
        "results": [job_id],
        "labels": ["--what", "labels"],
        "tally": ["--what", "tally"],
    }.items():
        path = out / f"{what}.csv"
        done = run("export", *args, "-o", str(path))
        assert done.returncode == 0, done.stderr
        found[what] = pd.read_csv(path)
    return found


def test_export_while_the_app_holds_the_database_gives_the_same_rows(studio_home, tmp_path):
    job_id = job_in_home(studio_home)
    app = Store(data_paths().database)  # the app's process (this one) holds the file
    app.ingest_all(data_paths().jobs)
    save_label(app, job_id, "a", "ana", Label("fail", 2, ("tone",), "rude"))
    save_label(app, job_id, "b", "bob", Label("pass"))
    grading.grade_jobs(app, [job_id], load_rules(RULES), RULES)
    (tmp_path / "held").mkdir()
    (tmp_path / "free").mkdir()

    held = _exports(tmp_path / "held", job_id)
    app.close()
    free = _exports(tmp_path / "free", job_id, cli)  # nobody holds the file: in this process
    app = Store(data_paths().database)
    save_label(app, job_id, "c", "ana", Label("unsure"))  # saved while the app runs
    later = run_cli("export", "--what", "labels", "-o", str(tmp_path / "later.csv"))
    rules = grading.rules_file(studio_home / "jobs" / job_id)
    graded = run_cli("grade", job_id, "--rules", str(rules))
    app.close()

    for what in held:
        pd.testing.assert_frame_equal(held[what], free[what])
    assert len(held["results"]) == 4 and "check_short" in " ".join(held["results"].columns)
    assert held["labels"]["verdict"].tolist() == ["fail", "pass"]
    assert "reading a private copy" in later.stderr
    assert pd.read_csv(tmp_path / "later.csv")["verdict"].tolist() == ["fail", "pass", "unsure"]
    assert graded.returncode == 0, graded.stderr
    assert "graded 1 job(s) with 1 rule(s)" in graded.stdout
    assert not list(Path(tempfile.gettempdir()).glob("batch-studio-snapshot-*"))  # removed


def test_a_cli_that_finds_the_database_broken_sets_it_aside_and_says_so(studio_home, tmp_path):
    job_id = job_in_home(studio_home)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    save_label(store, job_id, "a", "ana", Label("pass"))
    store.close()
    data_paths().database.write_bytes(b"garbage" * 1000)

    done = cli("export", "--what", "labels", "-o", str(tmp_path / "labels.csv"))

    assert done.returncode == 0, done.stderr
    assert (
        "could not be read" in done.stderr and "set aside as studio.duckdb.broken-" in done.stderr
    )
    assert pd.read_csv(tmp_path / "labels.csv")["verdict"].tolist() == ["pass"]
    assert len(list(studio_home.glob("studio.duckdb.broken-*"))) == 1
