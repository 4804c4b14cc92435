"""A run's requests read again from the input as they enter the engine, a window at a time
in engine order, never all parsed at once (core/run/pending.py; issue 41 item 5)."""

import itertools
import json
from array import array

import pytest

from core.check.engine_requests import ChatRequest
from core.jobs.folder import create_job, queue_job
from core.jobs.ledger import read_ledger, verify_chain
from core.run import pending, worker
from core.run.engine import EngineDied
from core.run.feed import Feed
from core.run.outputs import Choice, Completion, success_line
from core.schemas import EngineConfig
from tests.support.jobs import StandIn

WINDOW = 8


def chat_line(custom_id: str, document: str, question: str) -> str:
    content = f"Document {document}. " + "A long shared text. " * 20 + f"Question: {question}"
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    request = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return json.dumps({**request, "body": body}) + "\n"


def make_job(tmp_path, lines):
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(lines))
    return create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))


def pending_of(job, done=()):
    """The job's requests on its one engine, those with an id in ``done`` having a result."""
    spec = job.read_spec()
    planned, _ = worker._to_run(job, spec, read_ledger(job), False, None, set())
    left = pending.Left(planned)
    left.discard(done)
    requests = pending.Pending(spec, job.input, planned, array("I", range(len(planned))), left)
    requests.window = WINDOW
    return requests


def numbered(count):
    return [chat_line(f"r{i}", str(i // 4), f"q{i}") for i in range(count)]


class Counted(pending.Pending):
    """Counts the requests parsed from the input."""

    parsed = 0

    def _read(self):
        for request in super()._read():
            self.parsed += 1
            yield request


class LazyEngine:
    """Pulls as an engine does, ``window`` inside at once, finishing the oldest first; at
    each pull, notes how many requests were parsed and not yet inside the engine."""

    def __init__(self, requests: Counted):
        self.requests, self.ahead, self.pulled = requests, [], 0

    def stream(self, mix, window):
        inside = []
        while True:
            for request in itertools.islice(mix, window - len(inside)):
                inside.append(request)
                self.pulled += 1
                self.ahead.append(self.requests.parsed - self.pulled)
            if not inside:
                return
            yield [(inside.pop(0), Completion(3, [Choice("ok", "stop", 1)]))]


def test_the_feed_never_holds_more_than_a_window_of_parsed_requests(tmp_path):
    job = make_job(tmp_path, numbered(50))
    requests = pending_of(job)
    requests.__class__ = Counted
    engine = LazyEngine(requests)
    lines = [line for batch in Feed(engine, "m").run("job", requests, 3) for line in batch]
    assert sorted(line["custom_id"] for line in lines) == sorted(f"r{i}" for i in range(50))
    assert requests.parsed == 50  # each read once
    assert max(engine.ahead) < WINDOW  # read a window ahead of the engine at most
    assert min(engine.ahead) == 0  # the next window is read only as the engine asks


def test_within_a_window_shared_prefixes_run_together_and_windows_keep_the_files_order(
    tmp_path,
):
    # Each window of 8 lines holds two documents' questions, interleaved in the file.
    lines = [
        chat_line(f"w{w}-{d}{q}", f"{2 - w}{d}", f"q{q}")  # later windows sort first
        for w in range(3)
        for q in range(4)
        for d in "ab"
    ]
    order = [r.custom_id for r in pending_of(make_job(tmp_path, lines))]
    assert sorted(order) == sorted(json.loads(line)["custom_id"] for line in lines)
    windows = [order[i : i + WINDOW] for i in range(0, len(order), WINDOW)]
    assert [{c[:2] for c in window} for window in windows] == [{"w0"}, {"w1"}, {"w2"}]
    for window in windows:
        documents = [c.split("-")[1][0] for c in window]
        assert documents == sorted(documents)  # each document's questions together


def test_requests_with_a_result_are_not_read_again_across_window_borders(tmp_path):
    job = make_job(tmp_path, numbered(30))
    done = {"r0", "r7", "r8", "r9", "r15", "r16", "r29"}  # at and across the borders
    left = {f"r{i}" for i in range(30)} - done
    requests = pending_of(job, done)
    assert len(requests) == len(left) == len(requests.left)
    read = [r.custom_id for r in requests]
    assert sorted(read) == sorted(left)  # each left once, none done
    requests.left.discard(["r1", "r20", "r1", "not-planned"])  # results written meanwhile
    left -= {"r1", "r20"}  # read no more
    assert len(requests) == len(left) == len(requests.left)
    assert {r.custom_id for r in requests} == left == set(requests.left)


class Stopping(StandIn):
    """Answers ``answers`` requests, then its engine's process ends (``EngineDied``) or, with
    ``kill``, the worker stops on an error; records the requests it was given."""

    def __init__(self, runs, answers, kill=False):
        self.answers, self.kill, self.given = answers, kill, []
        runs.append(self)

    def run(self, requests):
        for i, request in enumerate(requests):
            if i == self.answers:
                if self.kill:
                    raise RuntimeError("killed")
                raise EngineDied("the engine's process ended")
            self.given.append(request.custom_id)
            yield [success_line(request.custom_id, "m", Completion(2, [Choice("ok", "stop", 1)]))]


def test_a_resume_and_a_reload_run_only_the_lines_left_across_windows(tmp_path, monkeypatch):
    monkeypatch.setattr(pending, "ORDER_WINDOW", WINDOW)
    job = make_job(tmp_path, numbered(30))
    runs = []
    answers = iter([(11, True), (5, False), (100, False)])
    monkeypatch.setattr(
        worker, "make_executor", lambda spec, job_dir: Stopping(runs, *next(answers))
    )
    assert worker.run_job(job).state == "failed"  # 11 results, then the worker stopped
    assert len(read_ledger(job).succeeded) == 11
    queue_job(job)  # Resume: 5 more, then the engine's process ends and the model reloads
    status = worker.run_job(job)
    assert (status.state, status.succeeded) == ("completed", 30)
    first, second, third = (run.given for run in runs)
    assert len(first) == 11 and len(second) == 5 and len(third) == 14
    assert sorted(first + second + third) == sorted(f"r{i}" for i in range(30))  # once each
    assert verify_chain(job.output) == (30, [])


def test_the_plan_keeps_each_requests_columns_and_finds_each_id():
    from core.check.engine_requests import ChatRequest, EmbeddingRequest

    user = [{"role": "user", "content": "x"}]
    planned = pending.PlannedRequests()
    planned.add(ChatRequest(custom_id="é-1", messages=user, sampling={"max_tokens": 7}), 3, "/a")
    big = {"max_tokens": 2**33, "n": 300, "seed": 1}  # wider than the narrow columns
    planned.add(ChatRequest(custom_id="r2", messages=user, sampling=big), 2**32 + 5, "/b")
    planned.add(EmbeddingRequest(custom_id="r3", inputs=["x"]), 9, "/a")
    rows = list(planned)
    assert [(r.custom_id, r.line_no, r.folder, r.limit, r.answers, r.seeded) for r in rows] == [
        ("é-1", 3, "/a", 7, 1, False),
        ("r2", 2**32 + 5, "/b", 2**33, 300, True),
        ("r3", 9, "/a", 0, 1, False),
    ]
    assert [planned.index(c) for c in ("é-1", "r2", "r3", "r", "r33", "")] == [0, 1, 2] + [None] * 3
    for i in range(4, 40):  # the table grows with the rows
        planned.add(EmbeddingRequest(custom_id=f"r{i}", inputs=["x"]), i, "/a")
    assert [planned.index(f"r{i}") for i in range(3, 40)] == list(range(2, 39))
    assert planned.folders == ["/a", "/b"]


def test_left_counts_each_planned_id_once_and_ignores_the_others(tmp_path):
    requests = pending_of(make_job(tmp_path, numbered(20)), done=["r3", "r3", "r19", "x"])
    left = requests.left
    assert len(left) == 18 and 3 not in left and 2 in left
    left.discard(["r0", "r0", "nope"])
    assert len(left) == 17 == len(requests)
    assert sorted(left) == sorted(f"r{i}" for i in range(1, 19) if i != 3)  # expiry's ids


def test_a_plan_skips_repeated_ids_and_keeps_seeded_flags_and_adapters_per_engine(tmp_path):
    lines = numbered(6)
    seeded = json.loads(lines[4])
    seeded["body"]["seed"] = 5
    lines[4] = json.dumps(seeded) + "\n"
    lines.insert(2, lines[1])  # a repeat of r1: not planned, not run
    job = make_job(tmp_path, lines)
    spec = job.read_spec()
    planned, invalid = worker._to_run(job, spec, read_ledger(job), False, None, set())
    assert [p.custom_id for p in planned] == [f"r{i}" for i in range(6)] and not invalid
    assert [p.line_no for p in planned] == [1, 2, 4, 5, 6, 7]
    requests = pending_of(job)
    assert [k.seeded for k in requests.kinds()] in ([False, True], [True, False])
    assert sorted(r.custom_id for r in requests) == [f"r{i}" for i in range(6)]
    requests.rows = requests.rows[:4]  # the seeded line is the fifth
    assert [k.seeded for k in requests.kinds()] == [False]


def test_a_plan_keeps_each_reusable_requests_key_by_row_and_none_for_the_others():
    planned = pending.PlannedRequests()
    ids = ["s0", "s1", "k2", "s3", "k4"]  # rows without a key before, between and after
    keys = {"k2": bytes(range(16)), "k4": bytes(range(16, 32))}
    for line_no, custom_id in enumerate(ids, start=1):
        message = [{"role": "user", "content": "q"}]
        chat = ChatRequest(custom_id=custom_id, messages=message, sampling={"max_tokens": 4})
        planned.add(chat, line_no, "/m", keys.get(custom_id))
    assert [planned.key(row) for row in range(len(ids))] == [keys.get(i) for i in ids]
    assert [planned.key_of(i) for i in ids] == [keys.get(i) for i in ids]
    assert planned.key_of("absent") is None
    assert list(planned.keyed) == [0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="16 bytes"):
        planned.add(chat, 6, "/m", b"short")
