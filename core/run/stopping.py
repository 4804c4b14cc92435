"""How a worker is asked to stop: a cancel drains the engine, a second one stops at once."""

from __future__ import annotations

import signal

from core.run.local import Executor


class Cancelled(BaseException):
    """Raised in the main thread when the worker is asked to stop (SIGTERM/SIGINT).

    A BaseException, so that no ``except Exception`` on the way (engine retries) swallows it.
    """


class StopRequest:
    """What signals asked of the worker. The first SIGTERM (Cancel) drains: nothing new
    starts and the requests in the engine finish, as OpenAI's ``cancelling``. A second
    SIGTERM, or SIGINT, stops at once (so does any signal while no request runs)."""

    def __init__(self) -> None:
        self.draining = False
        self.executor: Executor | None = None

    def reset(self) -> None:
        self.draining, self.executor = False, None

    def on_signal(self, signum: int, _frame: object) -> None:
        # Runs in the main thread between two bytecodes: only flags, never a lock.
        if signum == signal.SIGTERM and not self.draining and self.executor is not None:
            self.draining = True
            self.executor.drain()
            return
        raise Cancelled(signal.Signals(signum).name)


STOP = StopRequest()
