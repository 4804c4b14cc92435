"""Labels saved as Review's keys save them: in their file at once, in the index on the
store's indexing thread, one pass for the saves of many sessions (core.store.indexer)."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import pytest

from core.human.files import LABELS
from core.store import human_index
from core.store.db import Store
from core.store.review import (
    Label,
    get_label,
    index_in_background,
    label_history,
    labels,
    record_label,
    wait_indexed,
)


@pytest.fixture
def db(finished_store, tmp_path: Path):
    store, job_id = finished_store
    return store, job_id, tmp_path


def test_eight_sessions_labels_reach_the_index_once_each_in_order_in_few_passes(db, monkeypatch):
    store, job_id, _ = db
    passes: list[int] = []
    apply = human_index._apply_labels
    monkeypatch.setattr(  # each pass that finds label lines applies them in one call
        human_index,
        "_apply_labels",
        lambda cur, found: (passes.append(len(found)), apply(cur, found)),
    )
    saved: dict[str, list[tuple[str, str]]] = {}  # reviewer -> (custom_id, verdict) in order
    misread: list[str] = []

    def reviewer(name: str) -> None:
        rng = random.Random(name)
        saved[name] = []
        for _ in range(12):
            custom_id, verdict = f"r{rng.randrange(6)}", rng.choice(["pass", "fail", "unsure"])
            record_label(store, job_id, custom_id, name, Label(verdict, tags=("t",)))
            saved[name].append((custom_id, verdict))
            assert wait_indexed(store, index_in_background(store))
            got = get_label(store, job_id, custom_id, name)  # read your own write
            if got is None or got.verdict != verdict:
                misread.append(f"{name} {custom_id}: {got}")

    threads = [threading.Thread(target=reviewer, args=(f"rev{k}",)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert misread == []
    last = {(c, name): v for name, made in saved.items() for c, v in made}
    frame = labels(store)
    assert {(c, r): v for c, r, v in frame[["custom_id", "reviewer", "verdict"]].values} == last
    history = store.query(
        "SELECT reviewer, custom_id, verdict FROM review_history ORDER BY line_no"
    )
    assert len(history) == 8 * 12  # each save once
    for name, made in saved.items():  # each reviewer's saves in the order made
        mine = history[history["reviewer"] == name]
        assert list(zip(mine["custom_id"], mine["verdict"], strict=True)) == made
    assert sum(passes) == 8 * 12
    assert len(passes) <= 8 * 12 / 2, passes  # saves share passes, not one each


def test_a_page_that_waits_for_its_saves_pass_reads_the_label_and_its_history(db):
    store, job_id, _ = db
    record_label(store, job_id, "r0", "ana", Label("fail"))
    ticket = index_in_background(store)
    assert wait_indexed(store, ticket)
    assert get_label(store, job_id, "r0", "ana").verdict == "fail"
    assert label_history(store, job_id, "r0")["verdict"].tolist() == ["fail"]


def test_a_store_closed_before_its_pass_keeps_the_label_in_its_file_for_the_next(db):
    store, job_id, tmp_path = db
    record_label(store, job_id, "r1", "bob", Label("pass", 4))
    before = set(threading.enumerate())
    index_in_background(store)
    (indexer,) = set(threading.enumerate()) - before
    store.close()  # before the pass: the thread ends, the label stays in its file
    assert not indexer.is_alive()
    assert '"verdict":"pass"' in (store.human_dir / LABELS).read_text()
    assert index_in_background(store) == 0  # a closed store's thread takes no more asks

    again = Store(tmp_path / "studio.duckdb")
    try:
        assert get_label(again, job_id, "r1", "bob") == Label("pass", 4)
    finally:
        again.close()


def test_a_failed_pass_says_so_and_the_next_indexes_the_label(db, monkeypatch):
    store, job_id, _ = db
    real_sync = human_index.sync
    calls: list[int] = []

    def sync_failing_once(cur, folder, read=None):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("disk went away")
        return real_sync(cur, folder, read)

    monkeypatch.setattr(human_index, "sync", sync_failing_once)
    record_label(store, job_id, "r2", "ana", Label("unsure"))
    assert not wait_indexed(store, index_in_background(store))  # said, not hidden
    assert get_label(store, job_id, "r2", "ana") is None
    assert wait_indexed(store, index_in_background(store))
    assert get_label(store, job_id, "r2", "ana").verdict == "unsure"


def test_a_keys_save_is_in_its_file_at_once_and_on_disk_before_the_index_has_it(db, monkeypatch):
    """Review's keys do not wait on the disk's flush (queued behind a job's or an export's
    writes); the index pass flushes the labels' file before it indexes the line."""
    store, job_id, _ = db
    events: list[str] = []
    fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), fsync(fd))[1])
    apply = human_index._apply_labels
    monkeypatch.setattr(
        human_index, "_apply_labels", lambda cur, found: (events.append("index"), apply(cur, found))
    )
    record_label(store, job_id, "r1", "ana", Label("pass"), durable=False)
    record_label(store, job_id, "r2", "ana", Label("fail"), durable=False)
    events.append("saved")
    assert '"custom_id":"r2"' in (store.human_dir / LABELS).read_text()
    assert wait_indexed(store, index_in_background(store))
    first_save = events.index("saved")
    # the first save made the file (its folder's entry is fsynced); no line was flushed by a
    # save, and the pass flushed the file once before it indexed both labels
    assert events[first_save:] == ["saved", "fsync", "index"], events
    assert get_label(store, job_id, "r2", "ana").verdict == "fail"
