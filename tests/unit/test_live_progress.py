"""Live numbers and cancel, without the engine: the rates the Monitor shows, the worker's
bookkeeping of generated and expected tokens, and a cancel that stops the engine."""

from __future__ import annotations

import json
import signal
import time

import pytest

from core.jobs.engine_files import RUNNING_ENV
from core.jobs.folder import CANCEL_SIGNAL, create_job, queue_job
from core.jobs.ledger import read_ledger
from core.run import worker
from core.run.engine import EngineActivity
from core.run.monitoring import rates
from core.run.outputs import Choice, Completion, success_line
from core.run.progress import eta, work_text
from core.run.stopping import StopRequest
from core.schemas import EngineConfig, JobStatus
from tests.support.jobs import StandIn, request_line
from tests.support.live_progress import expected_of, running_status


def test_speed_and_eta_follow_tokens_while_no_request_has_finished() -> None:
    # 200 requests all in the engine: none finished after 30 s, but 3,000 tokens written.
    status = running_status(total=200, generated_tokens=3_000, expected_output_tokens=12_800)
    samples = [
        {"t": 100.0, "done": 0, "output_tokens": 0},
        {"t": 105.0, "done": 0, "output_tokens": 10},  # the engine warming up
        {"t": 110.0, "done": 0, "output_tokens": 1_500},
        {"t": 120.0, "done": 0, "output_tokens": 3_000},
    ]
    # Two samples into generation the speed is shown, but no ETA is made from it yet.
    early = rates(samples[:3], status)
    assert early.tokens_per_s == pytest.approx(298.0) and early.eta_seconds is None
    speed = rates(samples, status)  # from the first sample that moved: (3,000 - 10) / 15 s
    assert speed.requests_per_s == 0 and speed.tokens_per_s == pytest.approx(2_990 / 15)
    assert speed.work_done == pytest.approx(3_000 / 12_800)
    assert speed.eta_seconds == pytest.approx((12_800 - 3_000) / (2_990 / 15))


def test_the_speed_counts_from_the_engines_first_token_not_from_a_heartbeat() -> None:
    # 160 requests: nothing for 4 s (prompts), then 1,121 tokens/s from t=102.76. The one
    # sample with tokens (t=104) saw 1,388 of them; a rate from the sample before (t=102,
    # no tokens yet) showed 694, one from the run's start 110 (a fresh clone's failure).
    status = running_status(total=160, generated_tokens=1_388, expected_output_tokens=12_619)
    status.first_token_at = 102.76
    samples = [{"t": 100.0 + 2 * i, "done": 0, "output_tokens": 0} for i in range(2)]
    samples.append({"t": 104.0, "done": 0, "output_tokens": 1_388})
    assert rates(samples, status).tokens_per_s == pytest.approx(1_388 / 1.24)
    # Under a second of tokens says too little (a first step's tokens over a moment): the
    # samples' rate stands in until the next heartbeat.
    status.first_token_at = 103.5
    assert rates(samples, status).tokens_per_s == pytest.approx(1_388 / 4)
    # A resumed run: the earlier runs' 500 answer tokens are not this run's speed.
    status = running_status(total=160, completion_tokens=700, run_completion_tokens=200)
    status.first_token_at = 100.0
    samples = [{"t": 99.0, "done": 40, "output_tokens": 500}]
    samples.append({"t": 110.0, "done": 60, "output_tokens": 1_500})
    assert rates(samples, status).tokens_per_s == pytest.approx(1_000 / 10)


def test_the_speed_counts_from_when_every_prompt_is_in_the_engine() -> None:
    # 150 chats on an AVX2 EPYC: 107 tokens at t=1.4 with 42 prompts still waiting, whose
    # step took 2 s; then ~290 tokens/s. Counted from t=1.4 the speed read 185 at t=9.5
    # for a true 261 over the job, from t=5.4 (every prompt in) 256.
    status = running_status(total=150, generated_tokens=1_607, expected_output_tokens=12_000)
    status.first_token_at = 0.0
    samples = [
        {"t": 1.4, "done": 0, "output_tokens": 107, "engine": {"running": 108, "waiting": 42}},
        {"t": 3.4, "done": 0, "output_tokens": 107, "engine": {"running": 108, "waiting": 42}},
        {"t": 5.4, "done": 0, "output_tokens": 557, "engine": {"running": 150, "waiting": 0}},
        {"t": 7.5, "done": 0, "output_tokens": 1_007, "engine": {"running": 150, "waiting": 0}},
        {"t": 9.5, "done": 0, "output_tokens": 1_607, "engine": {"running": 150, "waiting": 0}},
    ]
    samples.insert(0, {"t": -0.6, "done": 0, "output_tokens": 0})
    assert rates(samples, status).tokens_per_s == pytest.approx(1_050 / 4.1)
    # While prompts still wait, the speed counts from the first sample with tokens.
    assert rates(samples[:4], status).tokens_per_s == pytest.approx(450 / 4.0)
    # Once they are in, over one heartbeat only (2.1 s), it counts from the engine's first
    # token: one heartbeat's counts, a step more or less, read 30 % high in a run.
    assert rates(samples[:5], status).tokens_per_s == pytest.approx(1_007 / 7.5)


def test_a_job_finished_within_one_sample_shows_its_runs_averages_not_zero() -> None:
    # A warm engine answered 39 requests (1,170 tokens) in 1.5 s: one sample, none moved.
    status = JobStatus(
        state="completed", total=39, succeeded=39, run_done=39, completion_tokens=1_170,
        run_completion_tokens=1_170, elapsed_seconds=2.0, model_load_seconds=0.5,
    )  # fmt: skip
    speed = rates([{"t": 100.0, "done": 39, "output_tokens": 1_170}], status)
    assert speed.requests_per_s == pytest.approx(39 / 1.5)  # Monitor showed 0.00
    assert speed.tokens_per_s == pytest.approx(1_170 / 1.5)


def test_a_finished_jobs_average_is_its_results_over_its_running_time() -> None:
    # 80 requests (2,400 tokens) on a warm engine in 23.5 s (3.4/s). The engine handed the
    # results back at the end: every sample says done 0, the last one 1,900 tokens (the
    # Monitor read "Requests/s (average) 0.00" and a token speed as skewed).
    from datetime import UTC, datetime

    t0 = 1_000_000.0
    status = JobStatus(
        state="completed", total=80, done=80, succeeded=80, run_done=80,
        completion_tokens=2_400, run_completion_tokens=2_400, elapsed_seconds=24.0,
        model_load_seconds=0.0,
    )  # fmt: skip
    status.started_at = datetime.fromtimestamp(t0, UTC).isoformat()
    status.finished_at = datetime.fromtimestamp(t0 + 24, UTC).isoformat()
    samples = [{"t": t0 + 0.5, "done": 0, "output_tokens": 0}]
    samples += [
        {"t": t0 + 2.5 + 2 * i, "done": 0, "output_tokens": 190 * (i + 1)} for i in range(10)
    ]
    speed = rates(samples, status)  # from the sample before the first that moved (t0 + 0.5)
    assert speed.requests_per_s == pytest.approx(80 / 23.5)
    assert speed.average_requests_per_s == pytest.approx(80 / 23.5)
    assert speed.tokens_per_s == pytest.approx(2_400 / 23.5)
    # An interrupted run: what it wrote up to its last heartbeat.
    status = running_status(total=80, done=30, run_done=30, run_completion_tokens=900)
    status.started_at = datetime.fromtimestamp(t0, UTC).isoformat()
    status.pid, status.heartbeat_at = 2**22 + 7, t0 + 10.5  # no such process: interrupted
    assert status.interrupted
    assert rates(samples[:4], status).requests_per_s == pytest.approx(30 / 10)


def test_a_finished_jobs_average_counts_from_its_first_token_when_samples_lag() -> None:
    # Issue 58's closing walk: 20 chats on a warm engine from t0 + 0.6 (first token) to
    # t0 + 8.1; the engine's counter read 1 token at every heartbeat until the end, so the
    # first sample that moved was the last and the average counted from the one before it
    # (t0 + 6.2): "Requests/s (average) 10.47" for answers that each took 7.6 s.
    from datetime import UTC, datetime

    t0 = 1_000_000.0
    status = JobStatus(
        state="completed", total=22, done=22, succeeded=22, run_done=20,
        completion_tokens=176, run_completion_tokens=160, elapsed_seconds=8.1,
        model_load_seconds=0.0, reused=2, reused_completion_tokens=16,
    )  # fmt: skip
    status.started_at = datetime.fromtimestamp(t0, UTC).isoformat()
    status.finished_at = datetime.fromtimestamp(t0 + 8.1, UTC).isoformat()
    status.first_token_at = t0 + 0.6
    samples = [{"t": t0 + 2.1 + 2 * i, "done": 0, "output_tokens": 1} for i in range(3)]
    samples.append({"t": t0 + 8.1, "done": 22, "output_tokens": 176})
    speed = rates(samples, status)
    assert speed.requests_per_s == pytest.approx(20 / 7.5)
    assert speed.tokens_per_s == pytest.approx(160 / 7.5)


def test_the_worker_ends_its_samples_with_the_final_counts(tmp_path) -> None:
    from core.run.status_keeper import StatusKeeper

    job = create_job(_one_line_batch(tmp_path), tmp_path / "jobs", EngineConfig(model="m"))
    keeper = StatusKeeper(job)
    assert keeper.claim(state="running", total=1)
    keeper.count([ok("a", tokens=7)])  # the result came after the last heartbeat
    keeper.finish("completed")
    last = json.loads(job.metrics.read_text().splitlines()[-1])
    assert (last["done"], last["output_tokens"]) == (1, 7)


def test_while_the_model_loads_the_eta_says_so_with_the_measured_load_time() -> None:
    from datetime import UTC, datetime

    # The model's speed is known (an ETA of 0:27 from it stood for the whole 77 s load and
    # then jumped to 4:45): while it loads, no ETA, but the load's time left.
    status = running_status(total=80, expected_output_tokens=2_700, measured_tokens_per_s=100.0)
    status.enter("loading")
    status.history[-1]["at"] = datetime.fromtimestamp(time.time() - 20, UTC).isoformat()
    status.measured_load_seconds = 77.0
    speed = rates([], status)
    assert speed.loading and speed.eta_seconds is None
    assert speed.load_left_seconds == pytest.approx(57.0, abs=1.0)
    status.state = "running"
    assert rates([], status).eta_seconds is None  # running, but no speed of its own yet


def test_the_worker_says_it_is_loading_with_the_models_last_load_time(
    tmp_path, monkeypatch
) -> None:
    from core.plan.measured import record_run
    from tests.support.jobs import ScriptedExecutor

    record_run("none", output_tokens=0, requests=0, seconds=1.0, answers=[], load_seconds=77.0,
               home=tmp_path)  # fmt: skip
    job = ten_request_job(tmp_path)
    seen = []

    def loading(spec, job_dir):  # what the Monitor reads while the model loads
        seen.append(job.read_status())
        return ScriptedExecutor({f"r{i}": {"answer": "ok"} for i in range(10)}, "none")

    monkeypatch.setattr(worker, "make_executor", loading)
    assert worker.run_job(job).state == "completed"
    [status] = seen
    assert (status.state, status.measured_load_seconds) == ("loading", 77.0)
    assert rates([], status).loading


def _one_line_batch(tmp_path):
    batch = tmp_path / "b.jsonl"
    batch.write_text(request_line("a", "hi") + "\n")
    return batch


def test_no_eta_before_this_run_has_a_speed_of_its_own() -> None:
    """Issue 58, item 10: the model's speed on earlier runs (or the worker's first
    forecast) read 0:01 for 8 s at 0 of 39 done, beside "Output tokens/s 0"."""
    status = running_status(
        total=39, expected_output_tokens=1_254, measured_tokens_per_s=1_000.0, generated_tokens=25
    )
    status.eta_seconds, status.eta_at = 1.0, time.time()
    speed = rates([], status)
    assert speed.eta_seconds is None and speed.tokens_per_s == 0
    assert eta(status, speed)[0] == "estimating"
    now = time.time()
    samples = [
        {"t": now - age, "done": 0, "output_tokens": tokens}
        for age, tokens in ((30, 0), (20, 200), (10, 600), (0, 1_000))
    ]
    status.eta_seconds, status.eta_at = 9.0, now
    assert rates(samples, status).eta_seconds == pytest.approx(9.0, abs=1.0)  # now it has one


def test_a_resumed_runs_share_of_output_counts_only_what_it_generates() -> None:
    """Issue 58, item 10: earlier runs' and reused answers' tokens counted as generated."""
    status = running_status(
        total=39, done=20, runs=2, completion_tokens=1_000, run_completion_tokens=0,
        generated_tokens=1_020, expected_output_tokens=1_980,
    )  # fmt: skip
    speed = rates([], status)
    assert speed.work_done == pytest.approx(20 / 980)
    assert work_text(speed.work_done, status) == (
        "2% of about 980 expected output tokens generated (this run's; 1,000 more from "
        "earlier runs or reused answers)"
    )


def ok(custom_id: str, tokens: int = 4) -> dict:
    return success_line(custom_id, "m", Completion(2, [Choice("ok", "stop", tokens)]))


def test_the_worker_counts_running_tokens_refines_the_expected_total_ends_with_none_in_flight(
    tmp_path,
) -> None:
    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(request_line(c, "hi") + "\n" for c in "ab"))
    job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))

    class Counting(StandIn):
        def activity(self):
            return EngineActivity(generated_tokens=7, running=2)

    keeper = worker.StatusKeeper(job)
    keeper.expect(expected_of({"a": (10, 16), "b": (10, 16)}), bound=False, tokens_per_s=None)
    keeper.watch(Counting())
    keeper._read_engine()
    keeper.update()
    s = job.read_status()
    assert (s.generated_tokens, s.expected_output_tokens, s.in_flight) == (7, 20, 2)
    # "a" finished with 4 tokens: 3 of the 7 belong to "b", still running; a's expectation
    # of 10 becomes its real 4.
    keeper.count([ok("a")])
    s = job.read_status()
    assert (s.completion_tokens, s.generated_tokens, s.expected_output_tokens) == (4, 7, 14)
    # Ended, it shows nothing in the engine and no time left (it kept its last 2 before).
    keeper.count([ok("b")])
    keeper.finish("completed")
    s = job.read_status()
    assert (s.state, s.in_flight, s.eta_seconds) == ("completed", 0, None)


class Windowed(StandIn):
    """Three requests in its engine at a time, finishing in order; ``signals`` (of kind
    ``signum``) arrive right after the first result, as a Cancel click would, at the
    handler of the worker's ``stop`` (as :func:`worker.main` installs it). Stopped, it
    aborts what is inside, as the engine does."""

    def __init__(self, stop: StopRequest, signals: int, signum: int = CANCEL_SIGNAL) -> None:
        self.stop_request, self.signals, self.signum = stop, signals, signum

    def run(self, requests):
        requests = list(requests)
        inside, waiting = requests[:3], requests[3:]
        first = True
        while inside and not self.stopped:
            yield [ok(inside.pop(0).custom_id)]
            if first:
                first = False
                for _ in range(self.signals):
                    self.stop_request.on_signal(self.signum, None)
            if waiting:
                inside.append(waiting.pop(0))


def ten_request_job(tmp_path, count: int = 10):
    batch = tmp_path / "b.jsonl"
    batch.write_text("".join(request_line(f"r{i}", "hi") + "\n" for i in range(count)))
    return create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"))


def test_a_cancel_stops_the_engine_keeps_what_finished_and_a_resume_runs_the_rest(
    tmp_path, monkeypatch
) -> None:
    """Issue 58, item 5: the requests in the engine are aborted, not waited for."""
    job = ten_request_job(tmp_path)
    stop = StopRequest()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Windowed(stop, 1))
    status = worker.run_job(job, stop=stop)
    assert (status.state, status.done, status.left) == ("cancelled", 1, 9)
    said = "1 of 10 requests have a result (1 succeeded); 9 were cancelled without one"
    assert said in status.message and "a resume runs them" in status.message
    assert sorted(read_ledger(job).missing) == [f"r{i}" for i in range(1, 10)]
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Windowed(stop, 0))
    queue_job(job)  # Resume
    resumed = worker.run_job(job, stop=stop)
    assert resumed.state == "completed" and resumed.succeeded == 10
    assert read_ledger(job).coverage_problems() == []


def test_a_cancel_when_every_request_is_in_the_engine_cancels_the_job(
    tmp_path, monkeypatch
) -> None:
    """Issue 58, item 5: a small job all inside the engine is cancelled, never completed
    with every answer computed after the cancel."""
    job = ten_request_job(tmp_path, count=3)
    stop = StopRequest()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Windowed(stop, 1))
    status = worker.run_job(job, stop=stop)
    assert (status.state, status.succeeded, status.left) == ("cancelled", 1, 2)


def test_a_cancel_signals_the_worker_and_now_stops_at_once(tmp_path, monkeypatch) -> None:
    from core.jobs.folder import cancel

    job = ten_request_job(tmp_path)
    job.write_status(running_status(total=10, done=4, succeeded=4, in_flight=3))
    sent = []
    monkeypatch.setattr("core.jobs.folder.os.kill", lambda pid, sig: sent.append(sig))
    assert "the engine stops within seconds" in cancel(job)
    assert "stopping now" in cancel(job, now=True)
    assert sent == [CANCEL_SIGNAL, signal.SIGINT]


def test_a_second_cancel_stops_at_once(tmp_path, monkeypatch) -> None:
    job = ten_request_job(tmp_path)
    stop = StopRequest()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Windowed(stop, 2))
    status = worker.run_job(job, stop=stop)
    assert status.state == "cancelled" and status.done == 1
    assert "9 were cancelled without one" in status.message
    assert not stop.leaving  # a cancel: the worker goes on with its queue


def test_a_sigterm_stops_the_job_as_a_cancel_does_and_the_worker_then_leaves(
    tmp_path, monkeypatch
) -> None:
    """Issue 58, item 5: a service manager's stop ends the job within seconds, keeping what
    it made, and the worker runs no other job."""
    job = ten_request_job(tmp_path)
    other = create_job(job.input, job.path.parent, EngineConfig(model="/models/none"))
    queue_job(job)
    queue_job(other)
    stop = StopRequest()
    stopping = Windowed(stop, 1, signum=signal.SIGTERM)
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: stopping)
    monkeypatch.setenv(RUNNING_ENV, "1")  # one job at a time: the other has not started
    monkeypatch.setattr(worker, "idle_seconds", lambda home: 0.0, raising=False)
    worker.serve(job, stop=stop)
    status = job.read_status()
    assert (status.state, status.done, status.left) == ("cancelled", 1, 9)
    assert "its worker was asked to stop" in status.message
    assert other.read_status().state == "queued"  # for the next worker


def test_a_cancel_while_the_model_loads_stops_at_once(tmp_path, monkeypatch) -> None:
    stop = StopRequest()

    def loading(spec, job_dir):
        stop.on_signal(CANCEL_SIGNAL, None)  # nothing runs yet: nothing to wait for

    job = ten_request_job(tmp_path)
    monkeypatch.setattr(worker, "make_executor", loading)
    status = worker.run_job(job, stop=stop)
    assert status.state == "cancelled" and status.done == 0 and status.left == 10


def test_a_resumed_jobs_speed_counts_only_this_run() -> None:
    from datetime import UTC, datetime

    t0 = 1_000_000.0
    status = JobStatus(state="completed", total=15, done=15, succeeded=15, run_done=10)
    status.run_completion_tokens = 100
    status.started_at = datetime.fromtimestamp(t0, UTC).isoformat()
    status.finished_at = datetime.fromtimestamp(t0 + 31, UTC).isoformat()
    samples = [
        {"t": t0 - 100, "done": 0, "output_tokens": 0},  # the first run, killed
        {"t": t0 - 90, "done": 5, "output_tokens": 50},
        {"t": t0 + 1, "done": 5, "output_tokens": 50},  # resumed 90 s later; loading
        {"t": t0 + 21, "done": 5, "output_tokens": 50},  # loaded
        {"t": t0 + 31, "done": 15, "output_tokens": 150},
    ]
    speed = rates(samples, status)
    assert speed.requests_per_s == pytest.approx(1.0)  # 10 requests in 10 s of running
    assert speed.tokens_per_s == pytest.approx(10.0)
