"""``engine status|unload MODEL|stop``: the resident worker's models, from a shell.

They read ``engine/state.json`` and drop command files the worker polls
(:mod:`core.jobs.engine_files`), then print its answer. The rule is the worker's
(:meth:`core.run.resident.Resident.carry_out`): a model a running job uses stays loaded, and a
stop lets the running jobs finish. A worker that runs jobs one at a time reads commands
between them: then the answer comes when its job ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from core.cli.common import EXIT_INVALID
from core.config import data_paths
from core.jobs.engine_files import EngineCommand, answer_lines, ask_engine, describe, read_state
from core.schemas import worker_alive

WAIT_SECONDS = 30.0


def cmd_status(args: argparse.Namespace) -> int:
    state = read_state(data_paths().home)
    if args.json:
        print(json.dumps(state.model_dump() if state else None, indent=1))
    else:
        print("\n".join(describe(state)))
    return 0


def _done_waiting(what: str, done) -> int:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if done():
            print(what)
            return 0
        time.sleep(0.1)
    print(f"asked; the worker is busy and does it when its job ends ({what})")
    return 0


def _no_answer(what: str) -> int:
    print(f"asked; the worker runs a job alone and {what} when it ends")
    return 0


def cmd_unload(args: argparse.Namespace) -> int:
    home = data_paths().home
    state = read_state(home)
    if args.model is None and (state is None or not state.models):
        print("no model is loaded")
        return 0
    if state is None or not any(args.model in (None, m.name, m.model) for m in state.models):
        print(f"error: {args.model} is not loaded", file=sys.stderr)
        return EXIT_INVALID
    answer = ask_engine(home, EngineCommand(action="unload", model=args.model), WAIT_SECONDS)
    if answer is None:
        return _no_answer("unloads it")
    print("\n".join(answer_lines(answer)))
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    home = data_paths().home
    state = read_state(home)
    if state is None:
        print("no resident worker runs")
        return 0
    answer = ask_engine(home, EngineCommand(action="stop"), WAIT_SECONDS)
    if answer is None:
        return _no_answer("stops")
    for line in answer_lines(answer):  # none for an idle worker that held no model
        print(line)
    if answer.running:
        return 0  # it exits when they end, which may be hours: not waited for
    return _done_waiting(f"worker {state.pid} stopped", lambda: not worker_alive(state.pid))


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    engine = commands.add_parser("engine", help="the models the resident worker keeps loaded")
    sub = engine.add_subparsers(dest="engine_command", required=True)
    status = sub.add_parser("status", help="the loaded models, their memory, the idle time")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)
    unload = sub.add_parser(
        "unload",
        help="unload a model (its folder name; none: every model) unless a running job uses it",
    )
    unload.add_argument("model", nargs="?")
    unload.set_defaults(handler=cmd_unload)
    stop = sub.add_parser(
        "stop",
        help="end the resident worker: it starts no new job, lets the running ones finish, "
        "then unloads every model and exits (queued jobs wait for the next worker)",
    )
    stop.set_defaults(handler=cmd_stop)
