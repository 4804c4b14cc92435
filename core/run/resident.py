"""The worker between jobs: it keeps its models loaded for an idle time, then exits.

While it holds the engine lock and no job is queued, the worker polls (every
:data:`~core.jobs.engine_files.POLL_SECONDS`) for a queued job, for commands (unload a
model, stop: :meth:`Resident.carry_out`, read while jobs run side by side too) and for
texts to embed, and rewrites ``engine/state.json`` every couple of seconds (see
:mod:`core.jobs.engine_files`). The next job on a loaded model starts at once.
After the idle time with nothing to do it unloads its models and exits, still holding the
lock, so no other worker loads an engine while this one's memory is still taken; but while
a queued job waits for its run window (:mod:`core.jobs.windows`) it unloads them and waits
on, to start that job by itself when its window opens.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from core.check.requests import parse_embeddings_body
from core.check.sampling import RequestError
from core.jobs.engine_files import (
    POLL_SECONDS,
    STATE_SECONDS,
    EmbedAnswer,
    EmbedRequest,
    EngineAnswer,
    EngineCommand,
    EngineState,
    LoadedModel,
    answer_command,
    answer_embed,
    answer_lines,
    idle_seconds,
    pending_embeds,
    state_file,
    take_commands,
    write_state,
)
from core.jobs.folder import queue_changed_at
from core.jobs.queue import queued_jobs
from core.jobs.windows import Clock
from core.model_folders import model_kind
from core.run.pool import POOL, tree_rss
from core.schemas import EngineConfig, JobDefaults

log = logging.getLogger("core.run.worker")
SCAN_SECONDS = 2.0  # the whole queue read at least this often while idle


class Resident:
    """The engine side of ``engine/``: state, commands and texts to embed."""

    def __init__(self, jobs_dir: Path, clock: Clock | None = None) -> None:
        self.jobs_dir = jobs_dir
        self.clock = clock or Clock()
        self.home = jobs_dir.parent
        self._written = 0.0
        self.idle_since: float | None = None
        self.job_ids: list[str] = []  # the jobs running now
        # The pool's users (a job's thread) and their jobs, set while jobs run side by side.
        self.job_of: Callable[[], dict[Hashable, str]] = dict
        self.stopping = False  # told to stop: no job starts; it exits once the running end
        self.stopped_at_mark = 0  # the queue's mark when the stop came
        POOL.on_change = lambda: self.publish(self.job_ids)

    def publish(self, job_ids: list[str] | None = None) -> None:
        """Replaces ``state.json`` with what this worker holds now (running ``job_ids``)."""
        self.job_ids = list(job_ids or [])
        idle = not self.job_ids
        if idle and self.idle_since is None:
            self.idle_since = time.time()
        elif not idle:
            self.idle_since = None
        in_use = self.in_use()
        models = [
            LoadedModel(
                model=config.model,
                name=config.model_name,
                kind=model_kind(config.model),
                memory_mib=round(held.memory_bytes / 2**20, 1),
                load_seconds=round(held.engine.load_seconds, 2),
                loaded_at=held.loaded_at,
                last_used=held.last_used,
                job_ids=in_use.get(config, []),
            )
            for config, held in POOL.held.items()
        ]
        write_state(
            self.home,
            EngineState(
                pid=os.getpid(),
                state="idle" if idle else "running",
                job_id=self.job_ids[0] if self.job_ids else None,
                job_ids=self.job_ids,
                models=models,
                idle_seconds=idle_seconds(self.home),
                idle_since=self.idle_since,
                rss_mib=round(tree_rss() / 2**20, 1),
                stopping=self.stopping,
                updated_at=time.time(),
            ),
        )
        self._written = time.monotonic()

    @contextmanager
    def output_to(self, log_file: Path) -> Iterator[None]:
        """Sends this process's output (its log and vLLM's) to a job's ``worker.log`` while
        it runs that job: a resident worker runs many jobs, each keeps its own log."""
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        target = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(target, 1)
        os.dup2(target, 2)
        os.close(target)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)

    def in_use(self) -> dict[EngineConfig, list[str]]:
        """The loaded engines that running jobs use now, with those jobs."""
        job_of = self.job_of()
        used = {}
        for config in list(POOL.held):
            # a copy: a job's thread releases its engines as it asks for its next model
            users = list(POOL.users.get(config, ()))
            if users:
                used[config] = sorted({job_of.get(u, f"thread {u}") for u in users})
        return used

    def commands(self) -> bool:
        """Carries out the commands waiting and answers each; False once one said stop."""
        for command in take_commands(self.home):
            answer = self.carry_out(command)
            for line in answer_lines(answer):
                log.info("engine %s: %s", command.action, line)
            answer_command(self.home, command, answer)
        return not self.stopping

    def carry_out(self, command: EngineCommand) -> EngineAnswer:
        """The one rule for a command, whoever sent it (CLI, Settings), whenever it comes:
        ``unload`` unloads the engines of its model (of every model when it names none) that
        no running job uses, and those in use stay loaded (their jobs run on undisturbed);
        ``stop`` does the same for every model, and the worker starts no job from then on:
        it exits once the running jobs have finished (:meth:`close` unloads the rest), and
        the queued jobs stay queued for the next worker."""
        in_use = self.in_use()
        wanted = [c for c in POOL.held if command.model in (None, c.model, c.model_name)]
        if command.action == "stop":
            wanted = list(POOL.held)
        unloaded: list[str] = []
        kept: dict[str, list[str]] = {}
        for config in wanted:
            if config in in_use:
                kept[config.model_name] = in_use[config]
            else:
                POOL.unload(config)
                unloaded.append(config.model_name)
        answer = EngineAnswer(
            action=command.action,
            model=command.model,
            unloaded=list(dict.fromkeys(unloaded)),
            kept=kept,
            pid=os.getpid(),
        )
        if command.action == "stop":
            self.stopping, self.stopped_at_mark = True, queue_changed_at(self.jobs_dir)
            running = list(dict.fromkeys(self.job_of().values()))
            queued = len(queued_jobs(self.jobs_dir)) if running else 0
            answer = answer.model_copy(update={"running": running, "queued": queued})
            self.publish(self.job_ids)
        return answer

    def queued_since_stop(self) -> bool:
        """Whether a job was queued after the stop came: whoever queued it was told a worker
        would run it, and this one still held the engine (a stop leaves only the jobs
        queued before it to the next worker)."""
        return self.stopping and queue_changed_at(self.jobs_dir) != self.stopped_at_mark

    def wait_for_work(self, queued: Callable[[], bool], opens_at: datetime | None = None) -> bool:
        """Idles with the models loaded until a job may run (True), or until the idle
        time passes or a stop command comes (False). Texts to embed are served meanwhile.
        With ``opens_at`` (a held job's run window opens then), the idle time unloads the
        models but the wait goes on, until that moment or a job queued meanwhile."""
        self.publish()
        mark, scanned, unloaded = -1, 0.0, False
        while True:
            # Reading every job's status costs; the mark a submission touches is one stat.
            changed = queue_changed_at(self.jobs_dir)
            due = opens_at is not None and self.clock.now() >= opens_at
            if changed != mark or due or time.monotonic() - scanned >= SCAN_SECONDS:
                # the window opened (yet nothing runs: cancelled meanwhile?), or another
                # job came, whose window may open sooner: the caller looks again
                again = due or (opens_at is not None and mark != -1 and changed != mark)
                mark, scanned = changed, time.monotonic()
                if queued() or again:
                    return True
            if not self.commands():
                return False
            if self.serve_embeds():
                self.idle_since = time.time()  # a text embedded is use: the idle time restarts
            limit = idle_seconds(self.home)  # read each time: Settings may change it
            idle = self.idle_since is not None and time.time() - self.idle_since >= limit
            if idle and not unloaded:
                if opens_at is None:
                    log.info("idle for %.0f s: unloading and exiting", limit)
                    return False
                log.info(
                    "idle for %.0f s: unloading; a job's run window opens at %s",
                    limit,
                    opens_at.isoformat(),
                )
                POOL.close()
                unloaded = True  # once; the wait goes on
                self.publish()
            if time.monotonic() - self._written >= STATE_SECONDS:
                self.publish()
            self.clock.sleep(POLL_SECONDS)

    def serve_embeds(self) -> bool:
        """Embeds the texts waiting on their model (loaded if needed); True if any."""
        waiting = pending_embeds(self.home)
        for path, request in waiting:
            if request is None:
                answer_embed(path, EmbedAnswer(error="the request file cannot be read"))
                continue
            answer_embed(path, embed_texts(request))
            self.publish()
        return bool(waiting)

    def close(self) -> None:
        """Unloads every model and removes ``state.json`` (before the lock is released)."""
        POOL.close()
        POOL.on_change = None
        path = state_file(self.home)
        try:
            if EngineState.model_validate_json(path.read_text()).pid == os.getpid():
                path.unlink()
        except (OSError, ValueError):
            pass


def embed_texts(request: EmbedRequest) -> EmbedAnswer:
    """The texts' vectors from the engine that runs embedding jobs on this model, through
    the same request path as a batch line (so the vectors are a batch job's)."""
    from core.run.engine import EngineLoadError, EngineRequestError

    started = time.monotonic()
    try:
        body = parse_embeddings_body("typed-text", {"input": request.texts}, JobDefaults())
    except RequestError as exc:
        return EmbedAnswer(error=str(exc))
    # A loaded engine of this model is used as it is; else the settings a job gets by default.
    config = next((c for c in POOL.held if c.model == request.model), None)
    try:
        engine, _ = POOL.get(config or EngineConfig(model=request.model))
    except EngineLoadError as exc:
        return EmbedAnswer(error=str(exc))
    try:
        results = [r for chunk in engine.stream([body], window=1, flush_seconds=0) for r in chunk]
    except Exception as exc:  # the engine failed: the next use loads it afresh
        log.exception("embedding typed texts failed")
        POOL.discard(engine)
        return EmbedAnswer(error=f"the engine failed: {exc!r}")
    _, result = results[0]
    if isinstance(result, EngineRequestError):
        return EmbedAnswer(error=str(result))
    vectors = [[float(x) for x in vector.tolist()] for vector in result.vectors]
    return EmbedAnswer(vectors=vectors, seconds=round(time.monotonic() - started, 4))
