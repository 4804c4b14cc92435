"""People's work is written to files first: a deleted or broken DuckDB file loses nothing.

Labels (with their history), preferences and samples are appended to ``data/human/*.jsonl``
before the index row; a database that is deleted, truncated or overwritten is set aside
(renamed, never deleted) and everything comes back: results, vectors, checks from
``rules.yaml``, and people's work from the files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from core.human.files import LABELS, PREFERENCES, SAMPLES
from core.qa import grading
from core.qa.rules import load_rules
from core.store import compare
from core.store.checks import pass_rates
from core.store.db import Store
from core.store.results import ResultFilter
from core.store.review import Label, get_label, label_history, labels, save_label
from core.store.samples import (
    SampleDefinition,
    SampleError,
    create_sample,
    delete_sample,
    get_sample,
    list_samples,
    sample_items,
)
from core.store.schema import MIGRATIONS
from core.store.vectors import stored_vector
from tests.support.jobs import finished_embedding_job, finished_job

RULES = "rules: [{name: short, type: length, unit: chars, max: 3}]"


def _studio(home: Path) -> tuple[Store, str, str]:
    """A data folder with a chat job and an embedding job, both ingested; returns the
    store and the two job ids."""
    rows = [{"custom_id": f"r{i}", "answer": "ok" if i % 2 else "too long"} for i in range(6)]
    chat = finished_job(home.parent / "build", rows)
    embed = finished_embedding_job(
        home.parent / "build-e", [{"custom_id": "e0", "input": "hello", "vectors": [[0.6, 0.8]]}]
    )
    (home / "jobs").mkdir(parents=True)
    for job in (chat, embed):
        job.path.rename(home / "jobs" / job.job_id)
    store = Store(home / "studio.duckdb")
    store.ingest_all(home / "jobs")
    return store, chat.job_id, embed.job_id


def _people_work(store: Store, job_id: str) -> dict:
    """Labels (one changed), a preference, a kept and a deleted sample, and checks; returns
    what the pages read of them."""
    save_label(store, job_id, "r1", "ana", Label("fail", 2, ("tone",), "rude"))
    save_label(store, job_id, "r1", "bob", Label("pass"))
    save_label(store, job_id, "r1", "ana", Label("pass", 4, (), "fine after all"))
    side_a, side_b = compare.Side(job_id), compare.Side(job_id, "model", "tiny")
    cmp = compare.comparison_id(side_a, side_b, "custom_id")
    pair = {"custom_id_a": "r2", "custom_id_b": "r2"}
    compare.save_preference(store, cmp, "r2", "ana", "B", pair, side_a, side_b)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=3, seed=7)
    kept = create_sample(store, "kept", definition)
    gone = create_sample(store, "gone", definition)
    delete_sample(store, gone.sample_id)
    grading.grade_jobs(store, [job_id], load_rules(RULES), RULES)
    return {
        "labels": labels(store).to_dict("records"),
        "history": label_history(store, job_id, "r1")[["reviewer", "verdict"]].values.tolist(),
        "preference": compare.preference_of(store, cmp, "r2", "ana"),
        "tally": compare.preference_tally(store, cmp),
        "samples": list_samples(store)[["sample_id", "name"]].values.tolist(),
        "items": sample_items(store, kept.sample_id)["custom_id"].tolist(),
        "checks": pass_rates(store, [job_id]).to_dict("records"),
    }


def _reopened(home: Path, job_id: str) -> tuple[Store, dict]:
    store = Store(home / "studio.duckdb")
    store.ingest_all(home / "jobs")
    grading.refresh(store, [job_id])
    side_a, side_b = compare.Side(job_id), compare.Side(job_id, "model", "tiny")
    cmp = compare.comparison_id(side_a, side_b, "custom_id")
    kept = list_samples(store)["sample_id"].iloc[0]
    return store, {
        "labels": labels(store).to_dict("records"),
        "history": label_history(store, job_id, "r1")[["reviewer", "verdict"]].values.tolist(),
        "preference": compare.preference_of(store, cmp, "r2", "ana"),
        "tally": compare.preference_tally(store, cmp),
        "samples": list_samples(store)[["sample_id", "name"]].values.tolist(),
        "items": sample_items(store, kept)["custom_id"].tolist(),
        "checks": pass_rates(store, [job_id]).to_dict("records"),
    }


def _truncate(path: Path) -> None:
    path.write_bytes(b"")


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(64 * 1024))


def _delete(path: Path) -> None:
    path.unlink()


@pytest.mark.parametrize("damage", [_delete, _truncate, _garbage])
def test_a_deleted_or_broken_database_comes_back_whole_from_the_files(tmp_path, damage):
    home = tmp_path / "home"
    store, job_id, embed_id = _studio(home)
    before = _people_work(store, job_id)
    vector = stored_vector(store, embed_id, "e0")
    results = store.query("SELECT custom_id, answer FROM results ORDER BY 1")
    store.close()
    original = (home / "studio.duckdb").read_bytes()
    damage(home / "studio.duckdb")
    broken = (home / "studio.duckdb").read_bytes() if (home / "studio.duckdb").exists() else None

    store, after = _reopened(home, job_id)

    assert after == before  # labels with history, preference, samples, checks: all back
    assert after["history"] == [["ana", "fail"], ["bob", "pass"], ["ana", "pass"]]
    assert before["checks"], "the checks were graded before the damage"
    np.testing.assert_allclose(stored_vector(store, embed_id, "e0"), vector)
    assert store.query("SELECT custom_id, answer FROM results ORDER BY 1").equals(results)
    aside = sorted(home.glob("studio.duckdb.broken-*"))
    if broken is None:  # nothing to set aside: the index is simply made again
        assert store.set_aside is None and not aside
    else:  # the broken file is kept, renamed, with its bytes as they were
        assert store.set_aside == aside[0] and aside[0].read_bytes() == broken != original
        assert "not a valid DuckDB database" in store.set_aside_reason
    store.close()


def test_a_changed_verdict_keeps_who_changed_it_and_when_in_the_file(tmp_path):
    store, job_id, _ = _studio(tmp_path / "home")
    save_label(store, job_id, "r0", "ana", Label("fail"))
    save_label(store, job_id, "r0", "bob", Label("pass"))
    save_label(store, job_id, "r0", "ana", Label("pass"))
    lines = [json.loads(x) for x in (store.human_dir / LABELS).read_text().splitlines()]
    assert [(x["reviewer"], x["verdict"]) for x in lines] == [
        ("ana", "fail"), ("bob", "pass"), ("ana", "pass"),
    ]  # fmt: skip
    assert lines[0]["at"] < lines[2]["at"]
    history = label_history(store, job_id, "r0")
    assert history["verdict"].tolist() == ["fail", "pass", "pass"]
    assert history["saved_at"].is_monotonic_increasing
    assert get_label(store, job_id, "r0", "ana").verdict == "pass"
    store.close()


def test_an_old_store_with_labels_only_in_duckdb_is_migrated_to_files_once(tmp_path):
    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    # What a store made before the files held: rows in DuckDB, no files, no sync state.
    store.execute(
        "INSERT INTO reviews (job_id, custom_id, reviewer, verdict, score, tags) "
        "VALUES (?, 'r3', 'old', 'fail', 2, ['facts'])",
        [job_id],
    )
    store.execute(
        "INSERT INTO preferences VALUES ('cmp_old', 'r3', 'old', ?, 'r3', ?, 'r3', 'tie', now())",
        [job_id, job_id],
    )
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]))
    store.execute(
        "INSERT INTO samples VALUES ('smp_old', 'old one', now(), ?, 2)",
        [definition.model_dump_json()],
    )
    store.execute(
        "INSERT INTO sample_items VALUES ('smp_old', 1, ?, 'r4', NULL), "
        "('smp_old', 2, ?, 'r5', NULL)",
        [job_id, job_id],
    )
    store.execute("DELETE FROM human_files")
    for name in (LABELS, PREFERENCES, SAMPLES):
        (store.human_dir / name).unlink(missing_ok=True)
    store.close()

    store = Store(home / "studio.duckdb")  # migrates
    written = {n: (store.human_dir / n).read_text() for n in (LABELS, PREFERENCES, SAMPLES)}
    assert json.loads(written[LABELS])["verdict"] == "fail"
    assert json.loads(written[SAMPLES])["items"][1]["custom_id"] == "r5"
    store.close()
    store = Store(home / "studio.duckdb")  # once: nothing is written again
    assert {n: (store.human_dir / n).read_text() for n in written} == written
    store.close()
    (home / "studio.duckdb").unlink()  # and the files alone now bring it all back
    store = Store(home / "studio.duckdb")
    assert get_label(store, job_id, "r3", "old") == Label("fail", 2, ("facts",))
    assert compare.preference_of(store, "cmp_old", "r3", "old") == "tie"
    assert sample_items(store, "smp_old")["custom_id"].tolist() == ["r4", "r5"]
    store.close()


def test_garbage_and_foreign_lines_are_named_and_skipped_and_other_labels_load(tmp_path):
    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    save_label(store, job_id, "r0", "ana", Label("pass"))
    store.close()
    (home / "studio.duckdb").unlink()
    good = (store.human_dir / LABELS).read_text()
    other = good.replace('"r0"', '"r1"')
    foreign = json.dumps(
        {"kind": "preference", "comparison": "c", "key": "k", "reviewer": "x", "job_a": "a",
         "job_b": "b", "choice": "A", "at": "2026-01-01T00:00Z"}
    )  # fmt: skip
    invalid = good.replace('"pass"', '"pass\\u0007"')  # a verdict never holds a control char
    (store.human_dir / LABELS).write_text(
        "{not json\n" + good + foreign + "\n" + invalid + "\x00\x01\n" + other
    )
    odd = {"kind": "sample", "sample_id": "smp_odd", "name": "odd", "at": "2026-01-01T00:00Z",
           "definition": {"method": "magic"},
           "items": [{"job_id": job_id, "custom_id": "r0"}]}  # fmt: skip
    (store.human_dir / SAMPLES).write_text(
        '{"kind": "sample", "sample_id": "s"}\n' + json.dumps(odd) + "\n"
    )

    store = Store(home / "studio.duckdb")

    assert get_label(store, job_id, "r0", "ana").verdict == "pass"
    assert get_label(store, job_id, "r1", "ana").verdict == "pass"  # after the bad lines
    found = store.human_problems()
    assert [p.split(":")[0] for p in found] == [
        "labels.jsonl, line 1", "labels.jsonl, line 3", "labels.jsonl, line 4",
        "labels.jsonl, line 5", "samples.jsonl, line 1",
    ]  # fmt: skip
    assert "does not belong in labels.jsonl" in found[1]
    assert "verdict" in found[2]
    assert list_samples(store)["sample_id"].tolist() == ["smp_odd"]  # its items still load
    with pytest.raises(SampleError, match=r"sample odd \(smp_odd\) in samples.jsonl"):
        get_sample(store, "smp_odd")  # a definition this version cannot draw: named
    store.close()


def test_a_torn_last_line_waits_and_is_closed_by_the_next_save(tmp_path):
    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    store.human_dir.mkdir()
    with (store.human_dir / LABELS).open("a") as handle:
        handle.write('{"kind": "label", "job_id": "')  # a writer died mid-line
    store.sync_human()
    assert store.human_problems() == []  # not read yet: it may still be being written
    save_label(store, job_id, "r2", "ana", Label("unsure"))
    assert get_label(store, job_id, "r2", "ana").verdict == "unsure"
    assert [p.split(":")[0] for p in store.human_problems()] == ["labels.jsonl, line 1"]
    store.close()


def test_a_long_labels_file_is_read_a_piece_at_a_time_with_every_label(tmp_path, monkeypatch):
    from core.human import files

    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    for i in range(6):
        save_label(store, job_id, f"r{i}", "ana", Label("pass" if i % 2 else "fail"))
    store.close()
    (home / "studio.duckdb").unlink()
    monkeypatch.setattr(files, "READ_BYTES", 300)  # about one line a piece

    store = Store(home / "studio.duckdb")

    assert labels(store)["verdict"].tolist() == ["fail", "pass"] * 3
    assert store.human_problems() == []
    store.close()


def test_a_labels_file_that_cannot_be_read_is_named_and_the_rest_loads(tmp_path):
    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    compare.save_preference(
        store, "cmp", "r0", "ana", "A", {}, compare.Side(job_id), compare.Side("other")
    )
    store.close()
    (home / "studio.duckdb").unlink()
    (store.human_dir / LABELS).mkdir()  # a folder where the file should be

    store = Store(home / "studio.duckdb")

    assert store.human_problems() == ["labels.jsonl: cannot be read: Is a directory"]
    assert compare.preference_of(store, "cmp", "r0", "ana") == "A"
    store.close()


def test_a_labels_file_edited_by_hand_is_read_again_whole(tmp_path):
    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    save_label(store, job_id, "r0", "ana", Label("pass", comment="ok"))
    path = store.human_dir / LABELS
    path.write_text(path.read_text().replace('"ok"', '"fine, really"'))  # longer, same line

    store.sync_human()

    assert get_label(store, job_id, "r0", "ana").comment == "fine, really"
    assert store.human_problems() == []
    assert len(label_history(store, job_id, "r0")) == 1
    store.close()


def test_a_label_is_fsynced_to_its_file_before_the_save_returns(tmp_path, monkeypatch):
    from core.human import files

    store, job_id, _ = _studio(tmp_path / "home")
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        real_fsync(fd)
        synced.append(os.fstat(fd).st_ino)

    monkeypatch.setattr(files.os, "fsync", fsync)
    save_label(store, job_id, "r0", "ana", Label("pass"))
    assert (store.human_dir / LABELS).stat().st_ino in synced
    store.close()


def test_lines_of_several_sessions_indexed_together_keep_every_label_and_the_last_wins(tmp_path):
    from core.human.files import LabelRecord, append, now_utc

    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    saved = [("r0", "ana", "fail"), ("r1", "bob", "pass"), ("r0", "ana", "unsure"),
             ("r0", "bob", "pass"), ("r2", "ana", "fail")]  # fmt: skip
    for custom_id, reviewer, verdict in saved:  # appended, as other sessions' saves are
        record = LabelRecord(
            job_id=job_id, custom_id=custom_id, reviewer=reviewer, verdict=verdict,
            tags=["t"], at=now_utc(),
        )  # fmt: skip
        append(store.human_dir, record)

    store.sync_human()  # one sync indexes the five lines

    rows = labels(store)[["custom_id", "reviewer", "verdict", "tags"]].values.tolist()
    assert rows == [["r0", "ana", "unsure", "t"], ["r0", "bob", "pass", "t"],
                    ["r1", "bob", "pass", "t"], ["r2", "ana", "fail", "t"]]  # fmt: skip
    history = label_history(store, job_id, "r0")
    assert history[["reviewer", "verdict"]].values.tolist() == [
        ["ana", "fail"], ["ana", "unsure"], ["bob", "pass"],
    ]  # fmt: skip
    store.close()


def test_eight_sessions_saving_at_once_lose_no_label_in_the_index_or_the_file(tmp_path):
    import random
    import threading

    home = tmp_path / "home"
    store, job_id, _ = _studio(home)
    last: dict[tuple[str, str], str] = {}

    def reviewer(name: str) -> None:
        rng = random.Random(name)
        for _ in range(12):
            custom_id, verdict = f"r{rng.randrange(6)}", rng.choice(["pass", "fail", "unsure"])
            save_label(store, job_id, custom_id, name, Label(verdict))
            last[(custom_id, name)] = verdict

    threads = [threading.Thread(target=reviewer, args=(f"rev{k}",)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    def stored(store: Store) -> dict[tuple[str, str], str]:
        frame = labels(store)
        return {(c, r): v for c, r, v in frame[["custom_id", "reviewer", "verdict"]].values}

    assert stored(store) == last
    assert len((store.human_dir / LABELS).read_text().splitlines()) == 8 * 12
    store.close()
    (home / "studio.duckdb").unlink()
    store = Store(home / "studio.duckdb")  # rebuilt from the file alone
    assert stored(store) == last
    store.close()


def test_a_new_index_whose_process_was_killed_opens_again_as_it_was(tmp_path):
    """Every migration is on disk when the store opens: DuckDB 1.5 cannot replay some of
    them from its log (a column added with a list's default), so a process killed before
    its first checkpoint left an index no process could open, and the next one set it aside."""
    import subprocess
    import sys

    path = tmp_path / "studio.duckdb"
    made = "import os, sys; from core.store.db import Store; Store(sys.argv[1]); os._exit(0)"
    subprocess.run([sys.executable, "-c", made, str(path)], check=True)

    store = Store(path)
    assert store.set_aside is None, store.set_aside_reason
    assert store.schema_version == len(MIGRATIONS)
    store.close()


def test_an_index_set_aside_says_why_in_one_line(tmp_path, monkeypatch):
    """DuckDB's internal errors end with a stack trace: the page shows their first line."""
    import duckdb

    from core.store import db

    real, calls = duckdb.connect, []

    def connect(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            raise duckdb.InternalException("INTERNAL Error: replay failed\nStack Trace: 0x1")
        return real(*args, **kwargs)

    monkeypatch.setattr(db.duckdb, "connect", connect)
    (tmp_path / "studio.duckdb").write_bytes(b"")
    store = Store(tmp_path / "studio.duckdb")
    assert store.set_aside is not None
    assert store.set_aside_reason == "INTERNAL Error: replay failed"
    store.close()
