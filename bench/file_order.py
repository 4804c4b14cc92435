"""``core run`` in file order, for ``bench/rerun.py``'s prefix part: the job's worker runs
its requests as the file has them, with the engine order (``core.run.engine_order``) left out.

    .venv/bin/python -m bench.file_order run FILE -o OUT [core run's options]

The job runs in a worker process, never in ``core run``'s: the worker this starts is this
module with ``--worker``, which patches the order and runs ``core.run.worker``. A worker that
already holds the engine would take the job in engine order, so stop it first
(``core engine stop``).
"""

from __future__ import annotations

import subprocess
import sys

WORKER = ["-m", "core.run.worker"]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--worker"]:
        import core.run.pending as pending
        import core.run.worker as worker

        pending.engine_order = list  # the requests as the file has them
        return worker.main(argv[1:])
    popen = subprocess.Popen

    def start(command, *args, **options):  # type: ignore[no-untyped-def]
        if isinstance(command, list) and command[1:3] == WORKER:
            command = [command[0], "-m", "bench.file_order", "--worker", *command[3:]]
        return popen(command, *args, **options)

    subprocess.Popen = start  # type: ignore[misc]  # the worker core.jobs starts for the job
    from core.cli.main import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
