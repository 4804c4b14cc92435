"""Rendering a user's template with bounds: time, size and loops.

The builder renders templates a person typed, once per row of a table. The Jinja sandbox
keeps them away from Python's internals, but not from work without end: two nested loops
over ``range(100000)`` run for hours, and ``'a' * 10**9`` takes gigabytes. Here:

- a render that passes :data:`MAX_RENDER_SECONDS` is stopped (an exception is raised in
  the rendering thread at its next Python step, which every Jinja loop takes);
- the text a render makes is counted as it is made and stopped past
  :data:`MAX_RENDER_CHARS`, and ``*`` on a text or list may not make more than that;
- ``range`` is capped at :data:`MAX_RANGE` items.

Each limit is that row's error; the rows after it render as usual.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 1_000_000  # a prompt of a million characters is far beyond any context
MAX_RANGE = 10_000


class RenderLimit(Exception):
    """A render went past a bound; the message says which, for the row's problem."""


class RenderTimeout(RenderLimit):
    """A render ran past its time."""


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The Jinja sandbox with ``*`` and ``range`` bounded."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.globals["range"] = _bounded_range

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                repeats = isinstance(seq, str | list | tuple) and isinstance(times, int)
                if repeats and len(seq) * times > MAX_RENDER_CHARS:
                    raise RenderLimit(
                        f"a repetition would make {len(seq) * times:,} characters; "
                        f"a prompt may have {MAX_RENDER_CHARS:,}"
                    )
        if operator == "**" and isinstance(right, int) and right > 1000:
            raise RenderLimit(f"an exponent of {right:,} is too large")
        return super().call_binop(context, operator, left, right)


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise SecurityError(f"range of {len(numbers):,} items; at most {MAX_RANGE:,}")
    return numbers


class _Timeout(BaseException):
    """Raised inside a render that ran too long (a BaseException, so that no
    ``except Exception`` in a template's filters swallows it)."""


def _set_async(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raises ``exc`` in a thread at its next Python step; None clears a pending one."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None
    )


class RenderWatch:
    """One watchdog thread for many renders: stops a render that runs too long.

    Use ``with watch.rendering():`` around each render, in one thread; ``close()`` ends
    the watchdog. A stop that arrives as a render ends is cleared, never delivered later.
    """

    def __init__(self, seconds: float = MAX_RENDER_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._started: float | None = None
        self._fired = False
        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="render-watch", daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(0.05, self.seconds / 4)):
            with self._lock:
                if self._started is not None and time.monotonic() - self._started > self.seconds:
                    self._started, self._fired = None, True
                    _set_async(self._thread_id, _Timeout)

    def _settle(self) -> None:
        """Clears a stop the watchdog sent that has not arrived (call with the lock held)."""
        if self._fired:
            _set_async(self._thread_id, None)
            self._fired = False

    @contextmanager
    def rendering(self) -> Iterator[None]:
        with self._lock:
            self._settle()
            self._thread_id = threading.get_ident()
            self._started = time.monotonic()
        try:
            try:
                yield
            finally:
                with self._lock:
                    self._started = None
                    self._settle()
        except _Timeout:
            raise RenderTimeout(
                f"the template ran for more than {self.seconds:g} s on this row (a loop too large?)"
            ) from None

    def close(self) -> None:
        self._stop.set()
        self._watcher.join()


def render(template: jinja2.Template, watch: RenderWatch, **context: Any) -> str:
    """The template rendered within the bounds; raises :class:`RenderLimit` past one."""
    with watch.rendering():
        parts, size = [], 0
        for chunk in template.generate(**context):
            size += len(chunk)
            if size > MAX_RENDER_CHARS:
                raise RenderLimit(
                    f"the template makes more than {MAX_RENDER_CHARS:,} characters on this row"
                )
            parts.append(chunk)
        return "".join(parts)
