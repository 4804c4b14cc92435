"""``engine status|unload MODEL|stop``: the resident worker's models, from a shell.

They read ``engine/state.json`` and drop command files the worker polls
(:mod:`core.jobs.engine_files`); a command given while a job runs is carried out when it ends.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from core.cli.common import EXIT_INVALID
from core.config import data_paths
from core.jobs.engine_files import EngineCommand, describe, read_state, send_command
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


def cmd_unload(args: argparse.Namespace) -> int:
    home = data_paths().home
    state = read_state(home)
    if state is None or not any(args.model in (m.name, m.model) for m in state.models):
        print(f"error: {args.model} is not loaded", file=sys.stderr)
        return EXIT_INVALID
    send_command(home, EngineCommand(action="unload", model=args.model))

    def gone() -> bool:
        now = read_state(home)
        return now is None or not any(args.model in (m.name, m.model) for m in now.models)

    return _done_waiting(f"unloaded {args.model}", gone)


def cmd_stop(args: argparse.Namespace) -> int:
    home = data_paths().home
    state = read_state(home)
    if state is None:
        print("no resident worker runs")
        return 0
    send_command(home, EngineCommand(action="stop"))
    return _done_waiting(f"worker {state.pid} stopped", lambda: not worker_alive(state.pid))


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    engine = commands.add_parser("engine", help="the models the resident worker keeps loaded")
    sub = engine.add_subparsers(dest="engine_command", required=True)
    status = sub.add_parser("status", help="the loaded models, their memory, the idle time")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)
    unload = sub.add_parser("unload", help="unload one model (its folder name)")
    unload.add_argument("model")
    unload.set_defaults(handler=cmd_unload)
    stop = sub.add_parser("stop", help="unload every model and end the resident worker")
    stop.set_defaults(handler=cmd_stop)
