"""``serve``: starts the app and its Batch API on one port (what ``make run`` does),
refusing to listen beyond this machine without sign-in (see core/access.py)."""

from __future__ import annotations

import argparse
import os
import sys

from core.access import OPEN_ENV, exposure_problem, open_override, sign_in_configured
from core.cli.common import EXIT_USAGE
from core.config import REPO_ROOT
from core.jobs.engine_files import IDLE_ENV


def cmd_serve(args: argparse.Namespace) -> int:
    problem = exposure_problem(args.host, sign_in_configured(), open_override())
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.engine_idle is not None:
        if args.engine_idle < 0:
            print("error: --engine-idle must be 0 or more seconds", file=sys.stderr)
            return EXIT_USAGE
        # The workers the app starts inherit it (core.jobs.engine_files.idle_seconds).
        os.environ[IDLE_ENV] = str(args.engine_idle)
    # server.py serves the pages (app.py) and the Batch API (/v1) on the same port.
    command = [sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "server.py")]
    command += ["--server.address", args.host, "--server.port", str(args.port)]
    os.chdir(REPO_ROOT)  # .streamlit/ (config and secrets) is read from here
    os.execv(sys.executable, command)
    return 0  # not reached: the process is now the app


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    serve = commands.add_parser("serve", help="start the app (refuses an open network address)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8501)
    serve.add_argument(
        "--engine-idle",
        type=float,
        metavar="SECONDS",
        help="keep models loaded this long after the last job (default: Settings, 600)",
    )
    serve.epilog = (
        f"Beyond loopback, configure sign-in or set {OPEN_ENV}=1 (docs/configuration.md)."
    )
    serve.set_defaults(handler=cmd_serve)
