"""Worker faults that need no engine: a stand-in executor feeds it lines."""

import errno
import time

from core.jobs.ledger import verify_chain
from core.jobs.output_file import OutputWriter
from core.run import worker
from core.run.engine import EngineDied
from core.run.outputs import Choice, Completion, success_line
from core.run.status_keeper import RESERVE_BYTES
from tests.support.jobs import StandIn, request_line, rewrite_spec


class FakeExecutor(StandIn):
    def run(self, requests):
        for request in requests:
            yield [success_line(request.custom_id, "m", Completion(2, [Choice("ok", "stop", 1)]))]


def make_job(tmp_path, count):
    from core.jobs.folder import create_job
    from core.schemas import EngineConfig

    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(count)))
    return create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))


def test_a_full_disk_fails_the_job_with_its_reason_and_keeps_what_was_written(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: FakeExecutor())
    real_write = OutputWriter.write
    written = []

    def write(self, lines):
        lines = list(lines)
        if lines and len(written) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        written.extend(lines)
        return real_write(self, lines)

    monkeypatch.setattr(OutputWriter, "write", write)
    job = make_job(tmp_path, 6)
    status = worker.run_job(job)
    assert status.state == "failed"
    assert "No space left on device" in status.error
    assert status.succeeded == 3
    assert verify_chain(job.output) == (3, [])  # the three lines written before are intact
    assert job.read_status().error == status.error  # the reason reached status.json
    assert not (job.path / ".space-reserve").exists()  # the space held for it was given back


def test_a_job_resumed_after_the_disk_was_freed_completes_without_repeats(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: FakeExecutor())
    job = make_job(tmp_path, 4)
    with OutputWriter(job.output) as writer:  # two results survived the earlier run
        writer.write(
            [success_line(f"r{i}", "m", Completion(2, [Choice("ok", "stop", 1)])) for i in (0, 1)]
        )
    status = worker.run_job(job)
    assert (status.state, status.succeeded) == ("completed", 4)
    ids = [
        line.split('"custom_id": "')[1].split('"')[0]
        for line in job.output.read_text().splitlines()
    ]
    assert sorted(ids) == ["r0", "r1", "r2", "r3"]


def test_requests_still_pending_when_the_window_ends_expire_and_can_be_retried(
    tmp_path, monkeypatch
):
    from core.jobs.ledger import read_ledger

    ended = []  # the window ends while the first result is written

    class OneThenLate(FakeExecutor):
        def run(self, requests):
            for lines in super().run(requests):
                ended.append(True)
                yield lines

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: OneThenLate())
    monkeypatch.setattr(worker, "_expired", lambda spec: bool(ended))
    job = make_job(tmp_path, 4)
    status = worker.run_job(job)
    assert status.state == "expired"
    ledger = read_ledger(job)
    assert len(ledger.succeeded) == 1
    assert {e["code"] for e in ledger.failed.values()} == {"expired"}
    assert sorted(ledger.retryable()) == ["r1", "r2", "r3"]


def test_a_job_whose_window_has_passed_expires_before_any_model_loads(tmp_path, monkeypatch):
    from core.jobs.ledger import read_ledger

    loaded = []
    monkeypatch.setattr(
        worker, "make_executor", lambda spec, job_dir: loaded.append(spec) or FakeExecutor()
    )
    job = make_job(tmp_path, 3)
    rewrite_spec(job, completion_window_hours=1e-9)  # ended before the worker started
    status = worker.run_job(job)
    assert status.state == "expired"
    assert loaded == []  # no model was loaded for a job that may no longer run
    ledger = read_ledger(job)
    assert not ledger.succeeded
    assert sorted(ledger.retryable()) == ["r0", "r1", "r2"]


def test_a_job_resumed_after_its_window_expires_before_any_model_loads(tmp_path, monkeypatch):
    from core.jobs.ledger import read_ledger

    loaded = []
    monkeypatch.setattr(
        worker, "make_executor", lambda spec, job_dir: loaded.append(spec) or FakeExecutor()
    )
    job = make_job(tmp_path, 4)
    with OutputWriter(job.output) as writer:  # the first run got two results in
        writer.write(
            [success_line(f"r{i}", "m", Completion(2, [Choice("ok", "stop", 1)])) for i in (0, 1)]
        )
    rewrite_spec(job, completion_window_hours=1e-9)  # resumed after the window
    status = worker.run_job(job)
    assert (status.state, loaded) == ("expired", [])
    ledger = read_ledger(job)
    assert sorted(ledger.succeeded) == ["r0", "r1"]  # kept
    assert {c: e["code"] for c, e in ledger.failed.items()} == {"r2": "expired", "r3": "expired"}


def test_a_finished_run_records_what_estimates_use(tmp_path, monkeypatch):
    from core.plan.measured import Answer, model_record

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: FakeExecutor())
    assert model_record("none", home=tmp_path).throughput is None
    worker.run_job(make_job(tmp_path, worker.MIN_REQUESTS_MEASURED))
    record = model_record("none", home=tmp_path)
    assert record.throughput is not None and record.throughput.requests_per_s > 0
    # Each answer with the limit it ran under (the job default max_tokens here).
    from core.schemas import JobDefaults

    limit = JobDefaults().max_tokens
    assert record.answers == [Answer(tokens=1, limit=limit, truncated=False)] * 8


def test_shards_have_their_own_state_and_one_can_be_retried_alone(tmp_path, monkeypatch):
    from core.jobs.ledger import read_ledger, shards
    from core.run.outputs import error_line

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: FakeExecutor())
    job = make_job(tmp_path, 6)
    rewrite_spec(job, shard_size=2)
    with OutputWriter(job.output) as output, OutputWriter(job.errors) as errors:
        output.write(
            [
                success_line(f"r{i}", "m", Completion(2, [Choice("ok", "stop", 1)]))
                for i in (0, 1, 2)
            ]
        )
        errors.write([error_line(f"r{i}", "engine_error", "boom", 500) for i in (3, 4)])
    parts = shards(read_ledger(job), 2)
    assert [p.state for p in parts] == ["completed", "failed", "partial"]

    worker.run_job(job, retry=True, shard=1)  # only r2 and r3: r4 stays failed, r5 missing

    ledger = read_ledger(job)
    assert "r3" in ledger.succeeded and "r4" in ledger.failed and "r5" not in ledger.succeeded
    assert [p.state for p in shards(ledger, 2)] == ["completed", "completed", "partial"]


def test_disk_space_is_held_while_the_job_runs(tmp_path, monkeypatch):
    job = make_job(tmp_path, 2)
    seen = []

    class Watching(FakeExecutor):
        def run(self, requests):
            seen.append((job.path / ".space-reserve").stat().st_size)
            yield from super().run(requests)

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Watching())
    assert worker.run_job(job).state == "completed"
    assert seen == [RESERVE_BYTES]
    assert not (job.path / ".space-reserve").exists()


class DyingEngine(FakeExecutor):
    """An engine whose process ends after ``answers`` results (an out-of-memory kill);
    each load makes a new one, recorded with the requests it was given."""

    def __init__(self, loads, answers):
        self.answers = answers
        loads.append(self)

    def run(self, requests):
        self.given = [r.custom_id for r in requests]
        for i, lines in enumerate(super().run(requests)):
            if i == self.answers:
                raise EngineDied("the engine's process ended (EngineDeadError())")
            yield lines


def test_an_engine_whose_process_ends_loads_afresh_for_the_requests_left(tmp_path, monkeypatch):
    loads = []
    answers = iter([2, 10])  # the first engine dies after 2 results, the second lives
    monkeypatch.setattr(
        worker, "make_executor", lambda spec, job_dir: DyingEngine(loads, next(answers))
    )
    job = make_job(tmp_path, 5)
    status = worker.run_job(job)
    assert (status.state, status.succeeded) == ("completed", 5)
    assert loads[1].given == ["r2", "r3", "r4"]  # only what had no result ran again
    assert verify_chain(job.output) == (5, [])  # one line each, the chain whole
    assert any("none again for the 3 requests left" in h.get("note", "") for h in status.history)


def test_an_engine_that_keeps_dying_stops_the_job_with_its_results_kept(tmp_path, monkeypatch):
    loads = []
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: DyingEngine(loads, 1))
    job = make_job(tmp_path, 6)
    status = worker.run_job(job)
    assert len(loads) == worker.ENGINE_RESTARTS + 1  # no endless reloading
    assert (status.state, status.succeeded) == ("failed", len(loads))
    assert "Resume runs the requests left" in status.message
    assert verify_chain(job.output) == (len(loads), [])


class StandInClient:
    """What watch_engine_core reads of vLLM's client of an engine process: the flag its
    monitor sets when the process dies, the queue a step waits on, its finalizer."""

    def __init__(self):
        import queue
        import types
        import weakref

        self.resources = types.SimpleNamespace(engine_dead=False)
        self.outputs_queue = queue.Queue()
        self._finalizer = weakref.finalize(self, lambda: None)


def test_a_step_waiting_on_a_dead_engine_process_is_woken_with_vllms_error(monkeypatch):
    from vllm.v1.engine.exceptions import EngineDeadError

    from core.run import engine

    monkeypatch.setattr(engine, "CORE_WATCH_SECONDS", 0.01)
    client = StandInClient()
    engine.watch_engine_core(client)
    client.resources.engine_dead = True  # vLLM's monitor saw the process end
    assert isinstance(client.outputs_queue.get(timeout=5), EngineDeadError)

    closed = StandInClient()  # shut down by us: nothing waits, nothing is put
    engine.watch_engine_core(closed)
    closed._finalizer.detach()
    time.sleep(0.1)
    closed.resources.engine_dead = True
    time.sleep(0.1)
    assert closed.outputs_queue.empty()
