"""Queues over a sample (issue 44 item 2): who reviews which item, a skip, each reviewer's
progress, and a queue refused whole with its reason."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from core.human import queues as qu
from core.human.files import QUEUES

KEYS = [("job_1", f"r{i}") for i in range(10)]


def test_each_item_goes_to_overlap_different_reviewers_and_each_gets_an_equal_share(tmp_path):
    queue = qu.set_queue(tmp_path, "s1", "ana, bo, cy, di, ed", 2, "owner")
    per_item = [queue.reviewers_of(i) for i in range(len(KEYS))]
    assert all(len(set(people)) == 2 for people in per_item)
    shares = Counter(p for people in per_item for p in people)
    assert set(shares.values()) == {4}  # 10 items x 2 reviews over 5 reviewers
    pairs = {frozenset(people) for people in per_item}
    assert len(pairs) == 10  # every pair of the five reviews some item together: agreement per pair
    assert qu.queue_of(tmp_path, "s1") == queue  # read back as saved
    everyone = set(itertools.chain.from_iterable(queue.assigned(KEYS, p) for p in queue.reviewers))
    assert everyone == set(KEYS)


@pytest.mark.parametrize("n", range(1, 9))
def test_a_reviewers_share_is_the_items_whose_reviewers_name_them_in_every_block(n):
    """``assigned`` reads the assignment's period once (it repeats every len(strides)
    blocks); item by item it names the same items as ``reviewers_of``, past many periods."""
    names = tuple(f"r{i}" for i in range(n))
    keys = [("job_1", f"c{i}") for i in range(n * n * 3 + 1)]
    for overlap in range(1, n + 1):
        queue = qu.Queue("s1", names, overlap, "owner")
        for who in names:
            expected = [k for i, k in enumerate(keys) if who in queue.reviewers_of(i)]
            assert queue.assigned(keys, who) == expected
            assert queue.assigned(keys[:2], who) == [k for k in expected if k in keys[:2]]


def test_the_latest_queue_of_a_sample_wins_and_other_samples_keep_theirs(tmp_path):
    qu.set_queue(tmp_path, "s1", "ana, bo", 1, "owner")
    qu.set_queue(tmp_path, "s2", "cy", 1, "owner")
    qu.set_queue(tmp_path, "s1", "ana\nbo\nAna\ncy", 3, "owner")  # a repeat (any case) once
    assert qu.queue_of(tmp_path, "s1").reviewers == ("ana", "bo", "cy")
    assert qu.queue_of(tmp_path, "s1").overlap == 3
    assert qu.queue_of(tmp_path, "s2").reviewers == ("cy",)
    assert qu.queue_of(tmp_path, "s3") is None


@pytest.mark.parametrize(
    "names, overlap, why",
    [
        ("", 1, "name at least one reviewer"),
        ("ana, bo", 3, "an overlap of 3 needs at least 3 reviewers; 2 named"),
        ("ana, bo", 0, "at least one review"),
        ("ana, b\x07o", 1, "cannot hold control characters"),
        (",".join(f"p{i}" for i in range(qu.MAX_REVIEWERS + 1)), 1, "at most 50 reviewers"),
    ],
)
def test_a_bad_queue_is_refused_with_its_reason_and_nothing_is_written(
    tmp_path, names, overlap, why
):
    with pytest.raises(qu.QueueError, match=why):
        qu.set_queue(tmp_path, "s1", names, overlap, "owner")
    assert not (tmp_path / QUEUES).exists()


def test_a_skipped_item_comes_after_the_rest_of_the_reviewers_queue(tmp_path):
    queue = qu.set_queue(tmp_path, "s1", "ana, bo", 1, "owner")
    mine = queue.assigned(KEYS, "ana")
    assert mine == KEYS[0::2]
    qu.skip(tmp_path, "s1", "ana", mine[0])
    qu.skip(tmp_path, "s1", "ana", mine[1])
    qu.skip(tmp_path, "s1", "bo", KEYS[1])  # bo's skip is bo's alone
    put_off = qu.skipped(tmp_path, "s1", "ana")
    assert qu.queue_order(queue, KEYS, "ana", put_off) == [*mine[2:], mine[0], mine[1]]
    qu.skip(tmp_path, "s1", "ana", mine[0])  # skipped again: after the other one now
    order = qu.queue_order(queue, KEYS, "ana", qu.skipped(tmp_path, "s1", "ana"))
    assert order[-2:] == [mine[1], mine[0]]


def test_progress_counts_each_reviewers_labelled_and_still_skipped_items(tmp_path):
    queue = qu.set_queue(tmp_path, "s1", "ana, bo", 2, "owner")  # everyone reviews all
    labelled = {"ana": {KEYS[0], KEYS[1], ("other", "x")}, "bo": set()}
    put_off = {"ana": [KEYS[1], KEYS[2]]}  # KEYS[1] skipped, then labelled
    rows = {p.reviewer: p for p in qu.progress(queue, KEYS, labelled, put_off)}
    assert (rows["ana"].assigned, rows["ana"].labelled, rows["ana"].left) == (10, 2, 8)
    assert rows["ana"].skipped == 1
    assert (rows["bo"].labelled, rows["bo"].left, rows["bo"].skipped) == (0, 10, 0)


def test_review_shows_a_reviewers_share_in_queue_order_each_item_with_its_own_answer(
    finished_store,
):
    """The items Review shows in a queue (``review.queue_items``): the reviewer's share, a
    skipped one last, each row still its own result (its answer, its labels)."""
    from core.store import review as rv
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample, sample_items

    store, job_id = finished_store
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=6)
    sample_id = create_sample(store, "s", definition).sample_id
    items = sample_items(store, sample_id)
    keys = list(zip(items["job_id"], items["custom_id"], strict=True))
    queue = qu.set_queue(store.human_dir, sample_id, "ana, bo", 1, "owner")
    mine = queue.assigned(keys, "ana")
    qu.skip(store.human_dir, sample_id, "ana", mine[0])
    shown = rv.queue_items(store, queue, items, "ana")
    assert list(zip(shown["job_id"], shown["custom_id"], strict=True)) == [*mine[1:], mine[0]]
    assert list(shown.index) == list(range(len(mine)))  # positions, as the panel reads them
    assert [a[1:] for a in shown["answer"]] == [c[1:] for c in shown["custom_id"]]  # r3: a3


def test_skip_item_orders_the_queue_as_queue_items_reads_it_after_the_skip(finished_store):
    """Skip on Review reorders the session's queue without reading the skips again
    (``review.skip_item``): after each skip, even of an item skipped before or the last,
    the order is the one ``queue_items`` reads from the file."""
    from core.store import review as rv
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample, sample_items

    store, job_id = finished_store
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=6)
    sample_id = create_sample(store, "s", definition).sample_id
    items = sample_items(store, sample_id)
    queue = qu.set_queue(store.human_dir, sample_id, "ana, bo", 1, "owner")
    shown = rv.queue_items(store, queue, items, "ana")
    for pos in (0, 0, 1, len(shown) - 1, len(shown) - 2):  # the 2nd skips a skipped one
        shown = rv.skip_item(store, sample_id, "ana", shown, pos)
        read = rv.queue_items(store, queue, items, "ana")
        assert shown.equals(read), pos
