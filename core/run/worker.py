"""``python -m core.run.worker JOB_DIR``: runs a job folder to the end, then the queue.

The worker loads the engine once and runs, in chunks, every request without a final
result. Each chunk's lines are appended durably (successes to ``output.jsonl``, failures
to ``errors.jsonl``) before ``status.json`` counts them; a heartbeat thread keeps
``status.json`` fresh while a chunk runs, so the UI can tell a busy worker from a dead one.

Started again on the same folder it resumes: a request with a final result never runs
twice. A job with run windows (:mod:`core.jobs.windows`) lets no request into the engine
after its window closes: the requests inside finish, their results are written, and the
job goes back to the queue, paused until its window opens, when it resumes on the same
results (:meth:`JobRun.pause`). A job started with ``retry`` (see
``core.jobs.folder.start_worker``) also reruns failed requests, except invalid input.

One worker holds the machine's engine at a time (``core.jobs.queue``): a worker that finds
the engine busy leaves its job queued and exits; the busy one runs it, beside the jobs
it runs already when its models are loaded or fit beside theirs (``core.run.running``, up
to the running-jobs cap of Settings; a cap of 1 runs them one after another), keeping the
model loaded when the next job uses the same one. One told to stop (``engine stop``,
:meth:`~core.run.resident.Resident.carry_out`) starts no job: it lets its running jobs
finish and exits, and the queued ones wait for the next worker. After its last job the
worker stays for an idle time with its models loaded (``core.run.resident``), so the next
job starts at once. A job whose requests name several models (``body.model`` mapped to
local folders) runs each model's requests in turn.

One job's run is a :class:`JobRun` in named steps: claim (the job, if it still waits) ->
plan (the requests to run, invalid ones and answers made before written first, the rest
in engine order) -> for each model, load -> run -> finish (how it ended, judged) ->
deliver (to an object output), then the final status.

How requests run (one local engine, or replicas on a Ray cluster) is the executor's
business (core/run/local.py); the worker owns the job folder. A Cancel stops the engine
within seconds: the requests inside are aborted and those finished are kept; SIGTERM does
the same and then ends the worker; a second signal (or SIGINT) stops at once
(core/run/stopping.py). Results written always stay, and a resume runs the rest.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from core.check import scan
from core.devices import gpu_count, runs_on_gpu
from core.jobs.delivery import deliver
from core.jobs.engine_files import idle_seconds, running_jobs_cap
from core.jobs.folder import CANCEL_SIGNAL, JobFolder, JobUnreadable
from core.jobs.ledger import Ledger, failed_since, read_ledger, shard_ids
from core.jobs.output_file import CorruptLine
from core.jobs.queue import WAITS, EngineLock, queued_jobs, runnable_jobs
from core.jobs.recovery import requeue_interrupted
from core.jobs.windows import Clock, Gate, paused_message, readable_windows
from core.plan.measured import Answer, ModelRecord, model_record, record_run
from core.reuse.index import reuse_owner, update_index
from core.reuse.keys import RequestKeys, model_folder
from core.reuse.plan import ReusePlan, plan_reuse
from core.run.engine import (
    EngineDied,
    EngineLoadError,
    configure_cpu_threads,
    fit_to_requests,
)
from core.run.eta import Expected, Forecast, StepTime
from core.run.local import Executor, make_executor
from core.run.outputs import answer_lengths, error_line, token_usage
from core.run.pending import Left, Pending, PlannedRequests, prepared
from core.run.pool import (
    MULTIPROCESSING_ENV,
    PARENT_ENV,
    POOL,
    Loads,
    budget_bytes,
    die_with_parent,
    loading_said,
    multiprocessing_on,
    waits_said_by,
)
from core.run.progress import plural
from core.run.ray_input import light, replicas_read_input
from core.run.resident import Resident
from core.run.running import Running, own_logs, say_waiting
from core.run.status_keeper import NO_SPACE, ResultWriters, StatusKeeper
from core.run.stopping import Cancelled, StopRequest
from core.schemas import WAITING_STATES, JobSpec, JobStatus, now_iso
from core.storage.s3 import StorageError, is_s3

log = logging.getLogger("core.run.worker")
MIN_REQUESTS_MEASURED = 8
# Loads of a model afresh in one run after its engine's process ended. An engine killed
# for memory or by a fault mid-job resumes by itself; one that a request of the job kills
# each time stops the job after these, rather than looping all night.
ENGINE_RESTARTS = 2
ADMIT_SECONDS = 0.1  # how often the main thread looks at the queue while jobs run

if __name__ == "__mp_main__":  # a process vLLM spawned from this worker: an engine's core,
    die_with_parent()  # which runs its model and must not outlive a worker killed with -9


def _expired(spec: JobSpec) -> bool:
    if not spec.completion_window_hours:
        return False
    created = datetime.fromisoformat(spec.created_at).timestamp()
    return time.time() > created + spec.completion_window_hours * 3600


def run_job(
    job: JobFolder,
    retry: bool = False,
    shard: int | None = None,
    stop: StopRequest | None = None,
    clock: Clock | None = None,
) -> JobStatus:
    """Runs every request of the job without a final result; returns the final status
    (``queued`` again when its run window closed first: paused, see :meth:`JobRun.pause`).

    The job is taken only while it still waits (:meth:`StatusKeeper.claim`): one cancelled
    before this worker got to it is left cancelled, and its status returned as it is.

    Args:
        job: the job folder.
        retry: also rerun failed requests (never those that failed as invalid input).
        shard: with ``retry``, rerun only this shard's requests.
        stop: what the worker's signal handlers ask (:func:`main` owns it); without one the
            run makes its own, which no signal reaches.
        clock: the time its run windows are judged at (the worker's).
    """
    stop = stop if stop is not None else StopRequest()
    stop.reset()  # before the claim: from then on a cancel signals this run
    return JobRun(job, StatusKeeper(job, stop), stop, clock).perform(retry, shard)


@dataclass(frozen=True)
class Ending:
    """How a run ended, as the job's final status says it."""

    state: str
    message: str
    error: str | None = None


@dataclass
class Plan:
    """What a run computes, model by model (the :meth:`JobRun.plan` step's result)."""

    spec: JobSpec
    left: Left  # the requests still without a result from this run
    reuse: dict[str, ReusePlan] = field(default_factory=dict)  # model folder -> reuse
    groups: dict[str, Pending] = field(default_factory=dict)  # engine folder -> its requests
    records: dict[str, ModelRecord] = field(default_factory=dict)  # what each model measured

    def expand(self, lines: list[dict]) -> list[dict]:
        """The engine's lines, each followed by its duplicates' copies (its answer
        folder's reuse plan: an engine runs its base's and its adapters' requests)."""
        out: list[dict] = []
        for line in lines:
            owner = next((p for p in self.reuse.values() if line["custom_id"] in p.copies), None)
            out += owner.expand([line]) if owner else [line]
        return out

    def part(self, number: int) -> str:
        """`` (model 2 of 3)`` where the job runs on several models, else nothing."""
        return f" (model {number} of {len(self.groups)})" if len(self.groups) > 1 else ""


class JobRun:
    """One job's run, as named steps: :meth:`claim` -> :meth:`plan` -> (for each model)
    :meth:`load` -> :meth:`run` -> :meth:`finish` -> :meth:`deliver`. :meth:`perform`
    takes them in turn; an error on the way ends the job ``failed`` with its reason, and
    the results written always stay."""

    def __init__(
        self, job: JobFolder, keeper: StatusKeeper, stop: StopRequest, clock: Clock | None = None
    ) -> None:
        self.job, self.keeper, self.stop = job, keeper, stop
        self.clock = clock or Clock()
        self.home = job.path.parent.parent
        self.writers: ResultWriters | None = None  # open from the plan step on
        self.gate: Gate | None = None  # the run window's, from the plan step on (None: any time)

    def perform(self, retry: bool, shard: int | None) -> JobStatus:
        """Takes the steps in turn; returns the job's final status (as it is, when the job
        no longer waited)."""
        keeper = self.keeper
        try:
            if not self.claim():
                return self.job.read_status()
            ended = self.run_models(self.plan(retry, shard))
            if ended == "paused" and self.pause(retry, shard):
                return keeper.status
            if ended != "completed":  # a cancel that came as it paused ends it cancelled
                self.end(self.finish("cancelled" if ended == "paused" else ended))
                return keeper.status
        except Cancelled:
            if keeper.claimed:
                self.end(self.finish("cancelled"))
        except EngineLoadError as exc:
            self.end(Ending("failed", "the model could not be loaded", str(exc)))
        except EngineDied as exc:
            message = (
                f"the engine's process ended {ENGINE_RESTARTS + 1} times in this run; the "
                "results written stay: Resume runs the requests left"
            )
            self.end(Ending("failed", message, str(exc)))
        except StorageError as exc:  # the replicas could not read the input object
            message = "the input object could not be read; Resume runs the requests left"
            self.end(Ending("failed", message, str(exc)))
        except JobUnreadable as exc:
            self.end(Ending("failed", "the job folder cannot be read", str(exc)))
        except CorruptLine as exc:  # a job queued before its file was damaged
            self.end(Ending("failed", "a result line cannot be read", str(exc)))
        except OSError as exc:
            if exc.errno not in NO_SPACE or not keeper.claimed:
                raise
            log.error("job %s: %s", self.job.job_id, exc)
            message = "the disk is full; the results written stay: free space, then Resume"
            self.end(Ending("failed", message, f"{exc.strerror or exc} ({self.job.path})"))
        except Exception as exc:  # the job fails with the reason; results written stay
            log.exception("job %s failed", self.job.job_id)
            self.end(Ending("failed", "the worker stopped on an error", repr(exc)))
        else:
            if self.writers is not None:
                self.writers.close()
            self.end(self.finish("completed"))
        finally:
            if self.writers is not None:
                self.writers.close()
                _index_answers(self.job)
        return keeper.status

    def claim(self) -> bool:
        """Step 1: takes the job if it still waits (False, touching nothing, if not).
        Leaves the job ``loading`` under this process's pid, its heartbeat beating."""
        return self.keeper.claim(state="loading", message="reading the requests")

    def plan(self, retry: bool, shard: int | None) -> Plan:
        """Step 2: what this run computes. Reads the spec and the results so far (the counts
        start from them), writes the result of each invalid request (never run) and of each
        answer made before (reuse, before any model loads), and puts each model's requests
        left, read again from the input as they enter the engine, in engine order
        (:mod:`core.run.pending`), with the answer lengths expected of them
        (:meth:`StatusKeeper.expect`). Leaves the result writers open and the plan.
        """
        job, keeper = self.job, self.keeper
        spec = job.read_spec()
        ledger = read_ledger(job)  # a torn last line is skipped here and cut by the writers
        keeper.update(total=len(ledger.ids))
        self.writers = writers = ResultWriters(job, keeper)
        keeper.seed(len(ledger.succeeded), len(ledger.failed))
        retried: set[str] = set()
        if retry:
            begun = keeper.status.retry_errors_from
            if begun is None:  # this retry's first run
                keeper.update(retry_errors_from=_size(job.errors))
            else:  # a retry its run window paused: what failed in it stays failed
                retried = failed_since(job, begun)
        planned, invalid = _to_run(job, spec, ledger, retry, shard, retried)
        keeper.plan(planned, ledger.failed)  # a retry's requests failed before
        del ledger  # its ids and results are counted: what follows holds no string a request
        writers.key_of = planned.key_of  # a success is indexed under its request's key
        writers.write(invalid)
        keeper.update(message="loading the model")
        plan = Plan(spec, left=Left(planned))
        windows = readable_windows(spec)  # checked when submitted
        if windows is not None:
            self.gate = Gate(windows, self.clock)
        if not planned:
            return plan
        plan.reuse = _reuse(spec, planned, writers, keeper)
        for reused in plan.reuse.values():
            plan.left.discard_rows(reused.reused)
        keep = light if replicas_read_input(spec) else None  # the replicas read the bodies
        plan.groups = {
            folder: Pending(spec, job.input, planned, rows, plan.left, keep)
            for folder, rows in _by_engine(spec, planned, plan.reuse).items()
        }
        plan.records = {f: model_record(Path(f).name, self.home) for f in plan.groups}
        _expect(keeper, planned, plan.groups, plan.records)
        return plan

    def run_models(self, plan: Plan) -> str:
        """Steps 3 and 4 for each model in turn: :meth:`load`, then :meth:`run`. Returns
        how it ended: ``completed``, ``expired`` (the completion window ended: checked
        before each model loads, as a load can take minutes, and after each result),
        ``cancelled`` (a cancel stopped the engine) or ``paused`` (its run window closed:
        checked before each model loads, and by the engine before each request enters)."""
        for number, folder in enumerate(plan.groups, start=1):
            if self.stop.stopping:
                return "cancelled"
            if _expired(plan.spec):
                self.expire(plan.left)
                return "expired"
            if self.gate is not None and self.gate.closed:
                return "paused"
            ended = self.run_model(plan, folder, number)
            if ended is not None:
                return ended
        return "cancelled" if self.stop.stopping else "completed"

    def run_model(self, plan: Plan, folder: str, number: int) -> str | None:
        """Steps 3 and 4 for one model. Where the engine's process ends meanwhile, the
        model loads afresh for the requests left (:data:`ENGINE_RESTARTS` times), every
        result written kept; jobs beside it on that engine do the same, on one new engine."""
        for restart in range(ENGINE_RESTARTS + 1):
            executor = self.load(plan, folder, number)
            try:
                return self.run(plan, folder, executor)
            except EngineDied as exc:
                left = len(plan.groups[folder])  # those with a result are not read again
                if not left or self.stop.stopping:  # its last result was in, or a cancel
                    return "cancelled" if self.stop.stopping else None
                if restart == ENGINE_RESTARTS:
                    raise
                said = f"{exc}; loading {Path(folder).name} again for the {left} requests left"
                log.warning("job %s: %s", self.job.job_id, said)
                self.keeper.note(said)
        return None  # not reached: the last restart returns or raises

    def load(self, plan: Plan, folder: str, number: int) -> Executor:
        """Step 3: the executor for one model, its engine sized to the requests (a loaded
        one from the pool where it fits). While it loads the status says ``loading`` with
        the time this model's last load took, not an ETA that stands still for the load and
        then jumps; while it waits for its load (jobs side by side) it says why
        (:class:`~core.run.pool.Loads`). Leaves the job ``running`` and the executor's
        events (a Ray node lost) going to the job's history."""
        keeper, spec, part = self.keeper, plan.spec, plan.part(number)
        requests = plan.groups[folder]
        group = spec.on_model(folder)
        last = plan.records[folder].load_seconds
        loading = loading_said(Path(folder).name, last) + part
        keeper.update(state="loading", message=loading, measured_load_seconds=last)

        def say(why: str | None) -> None:  # side by side, the main thread says why it waits
            # no countdown from the last load's time while it waits for its turn
            keeper.loading(why + part if why else loading, None if why else last)

        with waits_said_by(say):
            engine = fit_to_requests(
                group.engine, requests.kinds(), runs_on_gpu(spec.ray), loaded=list(POOL.held)
            )
            executor = make_executor(group.model_copy(update={"engine": engine}), self.job.path)
        executor.notify = keeper.note  # a cluster's events (a node lost) go to the history
        keeper.update(
            state="running",
            model_load_seconds=round(executor.load_seconds, 2),
            message=f"running {len(requests)} requests {executor.description}{part}",
        )
        return executor

    def run(self, plan: Plan, folder: str, executor: Executor) -> str | None:
        """Step 4: feeds one model's requests to its executor and writes each result as it
        comes (a reused request's duplicates with it), the heartbeat reading live progress
        and the ETA meanwhile; a cancel stops the executor (:mod:`core.run.stopping`).
        Leaves the results written and counted, and the run's speed and answer lengths
        recorded for estimates unless it was stopped. Returns ``expired`` when the
        completion window ended meanwhile (the requests left then have their result), and
        ``paused`` when the run window closed first (the executor let no request in after
        it, and the lines of those inside are written)."""
        keeper, writers, requests = self.keeper, self.writers, plan.groups[folder]
        assert writers is not None  # opened by the plan step
        forecast = Forecast(plan.records[folder], executor.window)
        keeper.watch(executor, forecast)
        executor.admit = self.gate  # asked before each request enters the engine
        self.stop.attach(executor)  # one asked to stop meanwhile stops at once
        measure = RunMeasure(requests.planned)
        try:
            for computed in executor.run(requests):
                lines = plan.expand(computed)
                writers.write(lines)
                keeper.first_result()
                plan.left.discard(line["custom_id"] for line in lines)
                measure.add(computed)
                if plan.left and _expired(plan.spec):
                    self.expire(plan.left)
                    return "expired"
        finally:
            self.stop.attach(None)
            keeper.watch(None)
        paused = bool(plan.left) and self.gate is not None and self.gate.closed
        if not self.stop.stopping and not paused:  # a stopped run's last requests were cut short
            name = Path(folder).name
            measure.record(name, executor.load_seconds, forecast.measured_step_time(), self.home)
        return "paused" if paused and not self.stop.stopping else None

    def pause(self, retry: bool, shard: int | None) -> bool:
        """Its run window closed: the job goes back to the queue, saying when it resumes
        (:func:`core.jobs.windows.paused_message`), with every result written kept; the
        worker that holds the engine takes it again when the window opens, and that run
        computes only the requests without a result (a retry stays one). No final status,
        no delivery, no end event. False, touching nothing, when a cancel came first."""
        assert self.gate is not None and self.writers is not None
        self.writers.close()
        gate, s = self.gate, self.keeper.status
        message = paused_message(gate.windows, gate.clock.now(), s.done, s.total)
        log.info("job %s: %s", self.job.job_id, message)
        closed = (gate.closed_at or gate.clock.now()).isoformat()
        return self.keeper.pause(message, closed, retry, shard)

    def expire(self, left: Iterable[str]) -> None:
        """Ends the requests that did not run in time, as OpenAI's batch does (code expired)."""
        assert self.writers is not None
        message = "the job's completion window ended before this request ran"
        self.writers.write([error_line(c, "expired", message, 408) for c in sorted(left)])

    def finish(self, ended: str) -> Ending:
        """Step 5: how the run ended (``completed``, ``expired`` or ``cancelled``), judged:
        ``completed`` only when every input line has exactly one final result (else
        ``failed``, naming what is missing), and ``failed`` when every request failed, so
        no outcome reads as a success it is not. Leaves the ending for :meth:`end`."""
        if ended == "expired":
            return Ending("expired", "the completion window ended; pending requests expired")
        if ended == "cancelled":
            return Ending("cancelled", _cancelled_message(self.keeper.status, self.stop))
        ledger = read_ledger(self.job)
        problems = ledger.coverage_problems()
        s = self.keeper.status
        if problems:
            log.error("job %s: results do not cover the input: %s", self.job.job_id, problems)
            return Ending(
                "failed",
                "not every request has exactly one result"
                + ("; Resume runs those without one" if ledger.missing else ""),
                "; ".join(problems),
            )
        if s.failed and not s.succeeded:
            codes = Counter(str((e or {}).get("code", "error")) for e in ledger.failed.values())
            reasons = ", ".join(f"{n} {code}" for code, n in codes.most_common(3))
            return Ending("failed", f"all {s.failed} requests failed ({reasons})", reasons)
        if s.failed:
            message = f"completed with errors: {s.succeeded} succeeded, {s.failed} failed"
            return Ending("completed", message)
        return Ending("completed", f"{s.succeeded} succeeded")

    def deliver(self) -> dict[str, str]:
        """Step 6: writes the results to the job's output when it is an object (s3://...),
        whichever entry point made the job (the Run page's jobs have nobody else to do it);
        a local output file is written by ``core run`` itself. A failed delivery loses
        nothing: the results stay here, and ``core resume JOB`` delivers them again.
        Leaves what the final status says of it (``delivered_to`` or ``delivery_error``)."""
        try:
            target = self.job.read_spec().output_path
        except JobUnreadable:
            return {}
        if not is_s3(target):
            return {}
        self.keeper.update(message=f"writing the results to {target}")
        try:
            deliver(self.job, target)
        except StorageError as exc:
            log.error("job %s: %s", self.job.job_id, exc)
            return {
                "delivery_error": f"{exc}. The results stay in the job folder; "
                f"`python -m core resume {self.job.job_id}` writes them again"
            }
        return {"delivered_to": target}

    def end(self, ending: Ending) -> None:
        """Delivers (:meth:`deliver`, while the heartbeat still beats: an upload takes
        time), then writes the ending as the job's final status."""
        delivered = self.deliver()
        self.keeper.finish(ending.state, ending.message, ending.error, delivered)


def _index_answers(job: JobFolder) -> None:
    """Adds the job's answers to the sorted index of reuse, so that the next job's start
    finds them there (a lookup reads what the index lacks from the jobs' files anyway)."""
    try:
        update_index(job.path.parent)
    except OSError as exc:
        log.warning("job %s: the index of answers was not updated: %s", job.job_id, exc)


def _to_run(
    job: JobFolder,
    spec: JobSpec,
    ledger: Ledger,
    retry: bool,
    shard: int | None,
    retried: set[str],
) -> tuple[PlannedRequests, list[dict]]:
    """The requests this run has to answer (without their texts: :mod:`core.run.pending`
    reads them again as they enter the engine), each deterministic one with its reuse key
    (:mod:`core.reuse`), and the result lines of the invalid ones (never run: their error
    is their result). ``retried``: requests this retry ran already (before its run
    window paused it). A line that repeats an earlier line's id is skipped (the ledger
    names those lines, so the scan keeps no table of ids)."""
    chosen: set[str] | None = None
    if retry:
        chosen = set(ledger.retryable()) - retried
        if shard is not None:
            chosen &= set(shard_ids(ledger, spec.shard_size, shard))

    def rerun(custom_id: str) -> bool:
        if chosen is not None:
            return custom_id in chosen
        # The ids without a result, asked of the ledger: a set of them costs ~40 B a line.
        done, failed = ledger.succeeded, ledger.failed
        return custom_id in ledger.known and custom_id not in done and custom_id not in failed

    planned = PlannedRequests()
    invalid: list[dict] = []
    reuse_keys = RequestKeys(spec)
    repeats = {line_no for line_no, _ in ledger.repeated_lines}
    seen: set[str] = set()  # the ids of the invalid lines (few): a repeat of one is skipped
    refused = job.read_refusals()  # what the submission's check found against the models
    replaced: dict[str, list[tuple[str, str, str]]] = {}  # what redaction replaced
    for checked in scan(job.input, spec.defaults, repeats=False):
        custom_id = checked.custom_id or f"line-{checked.line_no}"
        if checked.line_no in repeats or custom_id in seen or not rerun(custom_id):
            continue
        problem = refused.get(checked.line_no) if checked.valid else None
        if checked.valid and problem is None:
            # Before its key: the engine answers the redacted request, and reuse with it.
            if items := prepared(checked.request, spec):
                replaced[custom_id] = items
            folder = model_folder(spec, checked.request)
            planned.add(checked.request, checked.line_no, folder, reuse_keys.of(checked.request))
            continue
        seen.add(custom_id)
        if problem is not None and custom_id not in ledger.failed:
            message = f"line {checked.line_no}: {problem['message']}"
            invalid.append(
                error_line(
                    custom_id,
                    "invalid_request",
                    message,
                    line=checked.line_no,
                    param=problem.get("param"),
                )
            )
        elif custom_id not in ledger.failed:
            errors = [p for p in checked.problems if p.severity == "error"]
            message = f"line {checked.line_no}: " + "; ".join(p.message for p in errors)
            param = errors[0].param if errors else None
            invalid.append(
                error_line(custom_id, "invalid_request", message, line=checked.line_no, param=param)
            )
    if spec.keep_redactions and replaced:
        job.keep_redactions(replaced)
    # The ledger reads a broken line's id its own way (``line-N`` where it finds none), so
    # one that repeats a planned id may not be among its repeats: the planned line came first.
    invalid = [line for line in invalid if planned.index(line["custom_id"]) is None]
    return planned, invalid


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _keyed_by_model(planned: PlannedRequests) -> dict[str, array]:
    """The rows whose answers may be reused (those with a key), grouped by the local model
    folder their ``body.model`` maps to; every model folder has its group, empty or not.
    The others all run."""
    groups = [array("I") for _ in planned.folders]
    keyed, folder_nos = planned.keyed, planned.folder_nos
    for row in range(len(planned)):
        if keyed[row]:
            groups[folder_nos[row]].append(row)
    return dict(zip(planned.folders, groups, strict=True))


def _by_engine(
    spec: JobSpec, planned: PlannedRequests, plans: dict[str, ReusePlan]
) -> dict[str, array]:
    """The rows each engine still computes (all but those reused and the duplicates that
    take a copy), by the model folder it loads: an adapter's go to its base's engine, each
    run with its adapter (one engine, LoRA on, runs the base's and every adapter's requests
    side by side: :meth:`Pending.adapter`)."""
    answered = bytearray(len(planned))
    for reused in plans.values():
        for row in reused.reused:
            answered[row] = 1
        for duplicates in reused.copies.values():
            for duplicate in duplicates:
                if (row := planned.index(duplicate)) is not None:
                    answered[row] = 1
    engine_of = [spec.engine_folder(folder) for folder in planned.folders]
    # The engines in the order of their models' first lines, as the models run.
    groups: dict[str, array] = {engine: array("I") for engine in engine_of}
    for row in range(len(planned)):
        if not answered[row]:
            groups[engine_of[planned.folder_nos[row]]].append(row)
    return {engine: rows for engine, rows in groups.items() if rows}


def _reuse(
    spec: JobSpec, planned: PlannedRequests, writers: ResultWriters, keeper: StatusKeeper
) -> dict[str, ReusePlan]:
    """Writes the answers earlier jobs made (before any model loads) and returns, for each
    model, what its engine still computes (:mod:`core.reuse.plan`)."""
    plans = {}
    for folder, rows in _keyed_by_model(planned).items():
        plan = plan_reuse(
            planned,
            rows,
            jobs_dir=keeper.job.path.parent,
            job_id=keeper.job.job_id,
            model_name=spec.answer_name(folder),
            owner=reuse_owner(spec.provenance),
            write=writers.write,
        )
        for problem in plan.problems.values():
            keeper.note(f"an earlier answer was not reused, its request runs again: {problem}")
        plans[folder] = plan
    reused = sum(plan.reused_count for plan in plans.values())
    if reused:
        said = plural(reused, "answer") + (" comes" if reused == 1 else " come")
        keeper.note(f"{said} from earlier results or duplicates in the job")
    return plans


def _cancelled_message(status: JobStatus, stop: StopRequest) -> str:
    """How a cancelled job ended, in the counts of its result files."""
    failed = f", {status.failed:,} failed" if status.failed else ""
    why = " (its worker was asked to stop)" if stop.leaving else ""
    return (
        f"cancelled{why}: {status.done:,} of {status.total:,} requests have a result "
        f"({status.succeeded:,} succeeded{failed}); {status.left:,} were cancelled without "
        "one, and a resume runs them"
    )


def _expect(
    keeper: StatusKeeper,
    planned: PlannedRequests,
    groups: dict[str, Pending],
    records: dict[str, ModelRecord],
) -> None:
    """Gives the keeper the requests each engine runs, in run order, with the answer length
    expected of each: measured answers of its model replayed against its limit, or the
    limit where none were measured (one figure a model folder and limit)."""
    per_answer: dict[tuple[int, int], int] = {}
    bound, speed = False, None
    for folder, requests in groups.items():
        record = records[folder]
        bound = bound or not record.answers
        speed = speed or (record.throughput.output_tokens_per_s if record.throughput else None)
        for row in requests.rows:
            key = (planned.folder_nos[row], planned.limits[row])  # limit 0: vectors or scores
            if key not in per_answer:
                per_answer[key] = round(record.expected_tokens(key[1]) or key[1])
    engines = [requests.rows for requests in groups.values()]
    keeper.expect(Expected(planned, engines, per_answer), bound, speed)


class RunMeasure:
    """What a run of one model measured, for estimates: its speed and its answers' lengths
    under their limits (only from runs long enough to mean it)."""

    def __init__(self, planned: PlannedRequests) -> None:
        self.planned = planned  # each line's limit, found by its id
        self.started = time.monotonic()
        self.tokens = self.input_tokens = self.finished = 0
        self.answers: list[Answer] = []

    def add(self, lines: list[dict]) -> None:
        self.finished += len(lines)
        for line in lines:
            self.input_tokens += (token_usage(line) or (0, 0))[0]
            row = self.planned.index(line["custom_id"])
            limit = 0 if row is None else self.planned.limits[row]
            for tokens, truncated in answer_lengths(line):
                self.tokens += tokens
                if limit > 0:
                    self.answers.append(Answer(tokens=tokens, limit=limit, truncated=truncated))

    def record(
        self, model_name: str, load_seconds: float, step: StepTime | None, home: Path
    ) -> None:
        if self.finished < MIN_REQUESTS_MEASURED or not (self.tokens or self.input_tokens):
            return
        record_run(
            model_name,
            output_tokens=self.tokens,
            input_tokens=self.input_tokens,
            requests=self.finished,
            seconds=time.monotonic() - self.started,
            answers=self.answers,
            load_seconds=load_seconds or None,
            step_time=(step.base, step.per_request) if step is not None else None,
            home=home,
        )


def _waiting(job: JobFolder) -> bool:
    try:
        return job.read_status().state == "queued"
    except JobUnreadable:
        return True  # taken, so that it fails with its reason instead of waiting forever


def _run_queued(
    job: JobFolder, stop: StopRequest | None = None, clock: Clock | None = None
) -> JobStatus:
    """Runs a job the queue hands over; one whose folder cannot be read fails alone, with
    the reason, and the queue goes on."""
    try:
        wanted = job.read_status()
        return run_job(job, retry=wanted.retry, shard=wanted.retry_shard, stop=stop, clock=clock)
    except JobUnreadable as exc:
        log.error("%s", exc)
        status = JobStatus(error=str(exc), finished_at=now_iso())
        status.enter("failed", "the job folder cannot be read")
        job.write_status(status)
        return status


def _acquire(lock: EngineLock, tries: int = 5) -> bool:
    """Takes the engine lock; tries a few times, 20 ms apart, because a look at who holds
    it (``EngineLock.holder``, from the UI) takes it for an instant; and waits for a killed
    worker's lock to go (a Resume right after a kill -9 starts this worker)."""
    for attempt in range(tries):
        if lock.acquire():
            return True
        if attempt < tries - 1:
            time.sleep(0.02)
    return lock.acquire_from_the_dead()


def serve(
    job: JobFolder | None,
    jobs_dir: Path | None = None,
    stop: StopRequest | None = None,
    clock: Clock | None = None,
) -> JobStatus | None:
    """Runs ``job`` and then every queued job, holding the engine lock throughout; then
    keeps the models loaded for the idle time (:mod:`core.run.resident`) and runs the jobs
    queued meanwhile at once. With no ``job`` (``--resident``) it only does the latter.

    Jobs run side by side on the loaded engines (:mod:`core.run.running`), up to the
    running-jobs cap of Settings, where the engines' cores run in processes of their own
    (a worker with an idle time); else, or with a cap of 1, one after another in this
    thread, as before jobs shared the engine.

    A queued job outside its run windows is not started: its status says when it runs
    next, and the worker waits for that (its models unloaded after the idle time) rather
    than exit. ``clock`` tells the time the windows are judged at.

    Returns ``job``'s final status, or None when another worker holds the engine or
    ``job`` waits for its run window (the job stays queued and a worker will run it).
    """
    clock = clock or Clock()
    jobs_dir = job.path.parent if job is not None else jobs_dir
    assert jobs_dir is not None
    stop = stop if stop is not None else StopRequest()  # main's, which its signals reach
    lock = EngineLock(jobs_dir)
    first: list[JobStatus] = []  # job's final status, once it has one
    while _acquire(lock):
        requeue_interrupted(jobs_dir)  # jobs a killed worker left: resumed here, once
        resident = Resident(jobs_dir, clock)
        # Side by side only where each engine's core is a process of its own: in-process,
        # the model would run in whichever job's thread steps it, not in the main thread
        # that vLLM bound its CPU threads from.
        side_by_side = running_jobs_cap(jobs_dir.parent) > 1 and multiprocessing_on()
        try:
            if side_by_side:
                _serve_side_by_side(job, jobs_dir, stop, clock, resident, first)
            else:
                _serve_in_turn(job, jobs_dir, stop, clock, resident, first)
        except Cancelled:  # a signal while idle, or a SIGTERM that ended a load: exit
            log.info("stopped by a signal while idle or loading")
        finally:
            resident.close()  # models unloaded before the lock goes
            lock.release()
        # Checked after release: a job queued meanwhile would otherwise wait for a worker
        # that already gave up the lock. Told to stop, it leaves the queue to the next one,
        # but for a job queued after the stop: its submission found this worker holding the
        # engine and started none, so it runs here, on models loaded anew.
        if stop.leaving or not queued_jobs(jobs_dir):
            break
        if resident.stopping and not resident.queued_since_stop():
            break
    if job is not None and not first:
        log.info("another worker holds the engine; job %s waits in the queue", job.job_id)
    return first[0] if first else None


def _queue(
    job: JobFolder | None, jobs_dir: Path, clock: Clock, first: list[JobStatus], skip: set[str]
) -> list[JobFolder]:
    """The queued jobs that may start now, in the order they start: ``job`` (the one the
    worker was started for) first while it waits; those held for their run windows say
    when they run."""
    queue, held = runnable_jobs(jobs_dir, clock.now())
    held.say_when()
    queue = [j for j in queue if j.job_id not in skip]
    if (
        job is not None
        and not first
        and job.job_id not in skip
        and _waiting(job)
        and job.job_id not in held.ids
    ):  # started for it
        queue = [job] + [j for j in queue if j.job_id != job.job_id]
    return queue


def _wait_for_work(jobs_dir: Path, clock: Clock, resident: Resident) -> bool:
    """Idles with the models loaded until a job may run (True) or the idle time ends."""
    held = runnable_jobs(jobs_dir, clock.now())[1]
    runnable = lambda: bool(runnable_jobs(jobs_dir, clock.now())[0])  # noqa: E731
    return resident.wait_for_work(runnable, held.next_opening())


def _serve_in_turn(
    job: JobFolder | None,
    jobs_dir: Path,
    stop: StopRequest,
    clock: Clock,
    resident: Resident,
    first: list[JobStatus],
) -> None:
    """One job after another, each in this thread (a running-jobs cap of 1)."""
    while True:
        queue = _queue(job, jobs_dir, clock, first, set())
        if not queue:
            if _wait_for_work(jobs_dir, clock, resident):
                continue
            return
        if not resident.commands():
            return  # told to stop: models unloaded, the queue left to the next worker
        if _run_here(queue[0], job, stop, resident, first):
            return


def _run_here(
    queued: JobFolder,
    job: JobFolder | None,
    stop: StopRequest,
    resident: Resident,
    first: list[JobStatus],
) -> bool:
    """Runs a queued job in this thread, its output (the engine's too) in its log; True
    when the worker is to leave afterwards (SIGTERM)."""
    resident.publish([queued.job_id])
    with resident.output_to(queued.log_file):
        status = _run_queued(queued, stop, resident.clock)
    stop.reset()  # a cancel of that job is not this worker's end; SIGTERM is
    if job is not None and queued.job_id == job.job_id and status.state not in WAITING_STATES:
        first.append(status)  # a job its window paused is not at its end
    return stop.leaving


def _serve_side_by_side(
    job: JobFolder | None,
    jobs_dir: Path,
    stop: StopRequest,
    clock: Clock,
    resident: Resident,
    first: list[JobStatus],
) -> None:
    """Admits queued jobs beside the running ones, each in a thread of its own, while this
    thread keeps the signals, the queue and every model load (:mod:`core.run.running`)."""
    running = Running(lambda queued, stop: _run_queued(queued, stop, clock))
    loads = POOL.loads = Loads(POOL)
    resident.job_of = loads.job_of = running.job_of
    published: list[str] | None = None
    with own_logs():  # each job's records to its own log
        try:
            while True:
                for ended, status in running.reap():
                    ours = job is not None and ended.job_id == job.job_id
                    # a job its window paused is not at its end
                    if ours and status is not None and status.state not in WAITING_STATES:
                        first.append(status)
                stop.sink = running.on_signal  # a signal names no job: the files do
                if running.take_signals():
                    stop.leaving = True
                if running and not resident.commands():  # engine unload or stop, at once
                    _say_stopping(job, jobs_dir, clock, running, first)
                leaving = stop.leaving or resident.stopping  # no job starts from now on
                if leaving and not running:
                    return
                if not leaving:
                    _admit(job, jobs_dir, stop, clock, resident, running, first)
                if not running:
                    if stop.leaving or resident.stopping:
                        return
                    if _queue(job, jobs_dir, clock, first, set()):
                        continue  # one that waited may start now
                    stop.sink = None  # idle: a signal stops the worker at once, as before
                    published = None
                    if _wait_for_work(jobs_dir, clock, resident):
                        continue
                    return
                loads.serve()
                if running.ids != published:
                    published = running.ids
                    resident.publish(published)
                time.sleep(ADMIT_SECONDS)
        finally:
            stop.sink = None
            # Jobs have ended, but on the way out of an error or of a SIGTERM that ended a
            # load (Running.on_signal): each job is asked to stop before its wait ends.
            running.stop_all(leaving=True)
            for user in loads.waiting():
                loads.withdraw(user, Cancelled("the worker stopped"))
            running.join(timeout=60)
            running.reap()
            POOL.loads = None


def _admit(
    job: JobFolder | None,
    jobs_dir: Path,
    stop: StopRequest,
    clock: Clock,
    resident: Resident,
    running: Running,
    first: list[JobStatus],
) -> None:
    """Starts each queued job that may run beside the running ones now, in queue order;
    one that waits says why. A job on a Ray cluster runs alone, in this thread."""
    cap = running_jobs_cap(jobs_dir.parent)
    for queued in _queue(job, jobs_dir, clock, first, set(running.ids)):
        spec = _spec_of(queued)
        why = running.waits_for(queued, spec, cap)
        if why is not None:
            say_waiting(queued, why)
            if len(running) >= cap:
                return
            continue
        if not running and not resident.commands():
            return  # told to stop: models unloaded, the queue left to the next worker
        if spec is not None and spec.ray:
            stop.sink = None  # alone, in this thread: signals act as on a job run in turn
            _run_here(queued, job, stop, resident, first)
            return
        running.start(queued, spec)


def _say_stopping(
    job: JobFolder | None, jobs_dir: Path, clock: Clock, running: Running, first: list[JobStatus]
) -> None:
    """Each queued job's status says it waits for the next worker: this one was told to stop
    and only lets its running jobs finish."""
    for queued in _queue(job, jobs_dir, clock, first, set(running.ids)):
        say_waiting(queued, f"{WAITS}for the next worker: the engine's worker was told to stop")


def _spec_of(job: JobFolder) -> JobSpec | None:
    try:
        return job.read_spec()
    except JobUnreadable:
        return None  # taken anyway: it fails alone, with the reason


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    resident = len(argv) == 2 and argv[0] == "--resident"
    if len(argv) != 1 and not resident:
        print("usage: python -m core.run.worker JOB_DIR | --resident JOBS_DIR", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = StopRequest()  # this worker's: what its signals ask of the job it runs
    for signum in (CANCEL_SIGNAL, signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop.on_signal)
    # A worker that keeps its models loaded (an idle time) runs each engine's core in a
    # child process, so several engines live beside each other (core.run.pool); one that
    # exits after its queue keeps the engine in-process: one model at a time, and a cold
    # start about 40 % shorter (one process fewer imports torch). Spawned children
    # run die_with_parent above, forked ones here.
    jobs_dir = Path(argv[1]) if resident else Path(argv[0]).parent
    if gpu_count() == 0:
        configure_cpu_threads()  # before anything loads torch: OpenMP reads them once
    keeps_models = idle_seconds(jobs_dir.parent) > 0
    os.environ.setdefault(MULTIPROCESSING_ENV, "1" if keeps_models else "0")
    os.environ[PARENT_ENV] = str(os.getpid())
    POOL.budget = lambda: budget_bytes(jobs_dir.parent)  # this home's Settings, at each load
    os.register_at_fork(after_in_child=die_with_parent)
    if resident:
        serve(None, Path(argv[1]), stop)
        return 0
    status = serve(JobFolder(Path(argv[0])), stop=stop)
    return 0 if status is None or status.state == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
