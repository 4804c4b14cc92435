"""Every process can read: the command line works while the app holds the database.

DuckDB lets one process open the file; the command line then reads a private copy brought
up to date from the job folders and the human-work files, and answers the same rows. A
second app on the same data folder says why it cannot run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from core.config import REPO_ROOT, data_paths
from core.qa import grading
from core.qa.rules import load_rules
from core.store.db import Store
from core.store.review import Label, save_label
from tests.support.cli import cli
from tests.support.pages import job_in_home

RULES = "rules: [{name: short, type: length, unit: chars, max: 20}]"


# The app, in a process of its own: it holds the database until its stdin closes, and on a
# line "label" saves one more label while it holds it.
APP = """\
import sys
from core.config import data_paths
from core.store.db import Store
from core.store.review import Label, save_label
app = Store(data_paths().database)
print("holding", flush=True)
for line in sys.stdin:
    save_label(app, sys.argv[1], "c", "ana", Label("unsure"))
    print("saved", flush=True)
app.close()
"""


def _exports(out: Path, job_id: str) -> dict[str, pd.DataFrame]:
    """Runs the reading commands (in this process); returns what each wrote (failing with
    their stderr) and what they said on stderr."""
    found = {}
    for what, args in {
        "results": [job_id],
        "labels": ["--what", "labels"],
        "tally": ["--what", "tally"],
    }.items():
        path = out / f"{what}.csv"
        done = cli("export", *args, "-o", str(path))
        assert done.returncode == 0, done.stderr
        found[what] = pd.read_csv(path)
        found[f"{what} said"] = done.stderr
    return found


def _said(app: subprocess.Popen, words: str) -> None:
    line = app.stdout.readline()
    if line.strip() != words:
        app.kill()
        pytest.fail(f"the app said {line!r}, not {words!r}: {app.communicate()[1]}")


def test_export_while_the_app_holds_the_database_gives_the_same_rows(studio_home, tmp_path):
    job_id = job_in_home(studio_home)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    save_label(store, job_id, "a", "ana", Label("fail", 2, ("tone",), "rude"))
    save_label(store, job_id, "b", "bob", Label("pass"))
    grading.grade_jobs(store, [job_id], load_rules(RULES), RULES)
    store.close()
    (tmp_path / "held").mkdir()
    (tmp_path / "free").mkdir()

    free = _exports(tmp_path / "free", job_id)  # nobody holds the file
    # DuckDB locks the file against other processes only: the app holds it in its own
    app = subprocess.Popen(
        [sys.executable, "-c", APP, job_id], cwd=REPO_ROOT, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        _said(app, "holding")
        held = _exports(tmp_path / "held", job_id)
        app.stdin.write("label\n")  # saved while the app runs
        app.stdin.flush()
        _said(app, "saved")
        later = cli("export", "--what", "labels", "-o", str(tmp_path / "later.csv"))
        rules = grading.rules_file(studio_home / "jobs" / job_id)
        graded = cli("grade", job_id, "--rules", str(rules))
        app.stdin.close()
        assert app.wait(timeout=60) == 0, app.stderr.read()
    finally:
        if app.poll() is None:
            app.kill()
        app.wait()
        app.stdout.close()
        app.stderr.close()

    for what in ("results", "labels", "tally"):
        pd.testing.assert_frame_equal(held[what], free[what])
        assert "reading a private copy" in held[f"{what} said"]
        assert "private copy" not in free[f"{what} said"]
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
