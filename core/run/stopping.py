"""How a worker is asked to stop: the running job stops within seconds, a second ask at once."""

from __future__ import annotations

import signal
from collections.abc import Callable

from core.run.local import Executor


class Cancelled(BaseException):
    """Raised in the main thread when the worker is asked to stop at once.

    A BaseException, so that no ``except Exception`` on the way (engine retries) swallows it.
    """


class StopRequest:
    """What signals asked of the worker, which owns one (``core.run.worker.main`` installs
    its :meth:`on_signal` as the handler) and hands it to each job's run. The first cancel
    (``core.jobs.folder.CANCEL_SIGNAL``) or SIGTERM (a service manager; the worker then
    exits) while requests run stops the engine at its next step: the requests inside are
    aborted, those already finished are written, and the job ends ``cancelled``. A second
    one, or SIGINT, stops at once (so does any signal while no request runs: a model
    loading, an idle worker).

    A worker running jobs side by side (:mod:`core.run.running`) gives its signals a
    ``sink`` instead: the handler only notes the signal there (a SIGTERM during a model
    load also ends the load: ``Running.on_signal``), and the worker's main thread works out
    which job it meant; each job's thread has a StopRequest of its own, which the
    main thread :meth:`ask` s to stop."""

    def __init__(self) -> None:
        self.stopping = False  # the running job stops at the engine's next step
        self.leaving = False  # SIGTERM: the worker exits once the job has stopped
        self.executor: Executor | None = None
        self.sink: Callable[[int], None] | None = None  # jobs side by side: signals noted

    def reset(self) -> None:
        self.stopping, self.executor = False, None

    def attach(self, executor: Executor | None) -> None:
        """The executor a stop reaches from now on (None: none runs); one asked to stop
        before it started stops at once."""
        self.executor = executor
        if executor is not None and self.stopping:
            executor.stop()

    def ask(self, leaving: bool = False) -> None:
        """Stops this job's run at the engine's next step (from another thread: a job
        running beside others); ``leaving``: its worker exits afterwards."""
        self.leaving = self.leaving or leaving
        self.stopping = True
        if (executor := self.executor) is not None:
            executor.stop()

    def on_signal(self, signum: int, _frame: object) -> None:
        # Runs in the main thread between two bytecodes: only flags, never a lock.
        self.leaving = self.leaving or signum == signal.SIGTERM
        if self.sink is not None:
            self.sink(signum)
            return
        if signum != signal.SIGINT and not self.stopping and self.executor is not None:
            self.stopping = True
            self.executor.stop()
            return
        raise Cancelled(signal.Signals(signum).name)
