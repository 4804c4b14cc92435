"""Rendering a user's templates with bounds: time, memory, size and loops.

The builder renders templates a person typed once per row of a table, and a judge once
per answer. The Jinja sandbox keeps them away from Python's internals, but not from work
without end: two nested loops over ``range(100000)`` run for hours, and one C-level call
(``'%1500000000d' % 1``, ``text.center(2500000000)``) takes gigabytes before any Python
step could stop it. So templates render in a child process (:class:`Renderer`) that:

- may map at most :data:`MAX_RENDER_MEMORY` bytes (``RLIMIT_AS``): a call past it fails
  with MemoryError in the child, whatever the call;
- is killed when a render passes :data:`MAX_RENDER_SECONDS` (and a fresh one takes the
  next row);
- counts the text a render makes and stops past :data:`MAX_RENDER_CHARS`; ``*`` on a text
  or list may not make more than that, and ``range`` is capped at :data:`MAX_RANGE` items
  (early, clear refusals of the common runaways).

Each limit is that row's error; the rows after it render as usual. After
:data:`MAX_SLOW_ROWS` rows stopped for time the caller stops (the template is at fault).

Rendering processes are forked, not started: one small Python per calling process (the
forker, :class:`_Forker`), with Jinja and pydantic loaded, forks each in milliseconds where
a fresh interpreter took 0.6 s of CPU. The caller itself is never forked: it runs threads
(Streamlit's sessions), and a fork of it could inherit a lock another thread held.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from pydantic import BaseModel

from core.config import REPO_ROOT

MAX_RENDER_SECONDS = 2.0
MAX_RENDER_CHARS = 1_000_000  # a prompt of a million characters is far beyond any context
MAX_RANGE = 10_000
MAX_RENDER_MEMORY = 1 << 30  # the rendering process's address space, its contexts included
MAX_SLOW_ROWS = 3  # rows stopped for time before a build or judge stops
# Starting the rendering process (Python, Jinja, pydantic) and compiling: seconds on a
# busy machine; a runaway compile is bounded by the memory limit and this.
START_SECONDS = 30.0


class RenderError(Exception):
    """A render that failed; ``line`` is the template line, where known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class RenderLimit(RenderError):
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


def environment() -> BoundedSandbox:
    """The one environment user templates compile in. Strict: a misspelt variable is an
    error naming its line, not an empty string. Not optimized: Jinja's optimizer computes
    constant expressions while compiling (``'%1500000000d' % 1`` too), in the caller's
    process; unoptimized, everything is computed when rendering, within the bounds."""
    return BoundedSandbox(undefined=jinja2.StrictUndefined, autoescape=False, optimized=False)


def template_line(exc: BaseException) -> int | None:
    """The template line a render failed on (Jinja puts template frames in the traceback)."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == "<template>"
    ]
    return lines[-1] if lines else None


# -- between the caller and the rendering process (one JSON message each way per render) --


class _Start(BaseModel):
    templates: dict[str, str]


class _Call(BaseModel):
    name: str
    context: dict[str, Any]


class _Reply(BaseModel):
    text: str | None = None
    error: str | None = None
    line: int | None = None
    limit: bool = False


class _Ready(BaseModel):
    """The templates compiled: the names each reads from its context, or the first error."""

    names: dict[str, list[str]] = {}
    template: str | None = None  # the one that failed to compile
    error: _Reply | None = None


def _render_one(template: jinja2.Template, context: dict[str, Any]) -> str:
    parts, size = [], 0
    # The context as one mapping, never as keywords: a column may be named ``self``.
    for chunk in template.generate(context):
        size += len(chunk)
        if size > MAX_RENDER_CHARS:
            raise RenderLimit(
                f"the template makes more than {MAX_RENDER_CHARS:,} characters on this row"
            )
        parts.append(chunk)
    return "".join(parts)


def _failure(exc: BaseException) -> _Reply:
    """A failed compile or render as the reply that says why (and where)."""
    if isinstance(exc, MemoryError):
        message = f"the template needs more than {MAX_RENDER_MEMORY >> 20:,} MB of memory"
        return _Reply(error=message, line=template_line(exc), limit=True)
    if isinstance(exc, RenderLimit | jinja2.TemplateError):
        message = getattr(exc, "message", None) or str(exc)
    else:
        message = f"{type(exc).__name__}: {exc}"
    line = getattr(exc, "lineno", None) or template_line(exc)
    return _Reply(error=message, line=line, limit=isinstance(exc, RenderLimit))


def _compile(start: _Start) -> tuple[dict[str, jinja2.Template], _Ready]:
    """Compiles the templates here, never in the caller: Jinja computes constant parts of
    a template while compiling (``{{ 'x' | center(2000000000) }}`` too)."""
    env = environment()
    templates, ready = {}, _Ready()
    for name, text in start.templates.items():
        try:
            ready.names[name] = sorted(meta.find_undeclared_variables(env.parse(text)))
            templates[name] = env.from_string(text)
        except (Exception, MemoryError) as exc:  # the template's fault, reported as such
            return templates, _Ready(template=name, error=_failure(exc))
    return templates, ready


def _serve(channel: Connection) -> None:
    """A rendering process: compiles the templates it is sent first, then renders each
    call, under the memory limit, until its input ends."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MAX_RENDER_MEMORY, MAX_RENDER_MEMORY))
    try:
        templates, ready = _compile(_Start.model_validate_json(channel.recv_bytes()))
        channel.send_bytes(ready.model_dump_json().encode("utf-8"))
        while True:
            call = _Call.model_validate_json(channel.recv_bytes())
            try:
                reply = _Reply(text=_render_one(templates[call.name], call.context))
            except (Exception, MemoryError) as exc:  # a user's template may fail in any way
                reply = _failure(exc)
            channel.send_bytes(reply.model_dump_json().encode("utf-8"))
    except (EOFError, OSError):  # the caller closed its end, or went
        return


# -- the forker ---------------------------------------------------------------------------


def _fork_renderers(control: socket.socket) -> None:
    """The forker's loop: each ``fork`` message brings one end of a socket pair, and a
    rendering process forked here serves it; ``kill PID`` ends one of them (the forker is
    their parent, so a pid it has not reaped is never another process's). It ends when
    its caller goes (its socket's end is closed)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the caller's to handle
    children: set[int] = set()
    while True:
        for pid in list(children):  # reap the ones whose caller closed them
            if os.waitpid(pid, os.WNOHANG)[0]:
                children.discard(pid)
        message, fds, _, _ = socket.recv_fds(control, 64, 1)
        if not message:
            return
        if message == b"fork":
            pid = os.fork()
            if pid == 0:
                try:
                    control.close()
                    _serve(Connection(fds[0]))
                finally:
                    os._exit(0)
            os.close(fds[0])
            children.add(pid)
            control.send(str(pid).encode())
        elif message.startswith(b"kill "):
            pid = int(message.split()[1])
            if pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                children.discard(pid)
            control.send(b"ok")


class _Forker:
    """The calling process's end of its forker (started on first use)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "core.plan.bounded_render", str(theirs.fileno())],
            cwd=REPO_ROOT,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # a stray print must not go to the caller's output
        )
        theirs.close()
        ours.settimeout(START_SECONDS)  # a forker that stopped answering is an OSError
        self._control = ours
        self._lock = threading.Lock()  # one request and its reply at a time
        self.broken = False  # a request failed: its reply may still come, out of turn

    def fork(self) -> tuple[int, Connection]:
        """A new rendering process's pid and the caller's channel to it."""
        mine, its = socket.socketpair()
        with its:
            pid = int(self._ask(b"fork", its.fileno()))
        return pid, Connection(mine.detach())

    def kill(self, pid: int) -> None:
        self._ask(f"kill {pid}".encode())

    def _ask(self, message: bytes, *fds: int) -> bytes:
        with self._lock:
            try:
                if self.broken:
                    raise OSError("the forker of rendering processes failed earlier")
                socket.send_fds(self._control, [message], list(fds))
                reply = self._control.recv(64)
                if not reply:
                    raise OSError("the forker of rendering processes ended")
                return reply
            except OSError:
                self.broken = True
                raise


_forker: _Forker | None = None
_forker_lock = threading.Lock()


def _the_forker() -> _Forker:
    """This process's forker: a new one if the last one failed."""
    global _forker
    with _forker_lock:
        if _forker is None or _forker.broken:
            _forker = _Forker()
        return _forker


def _forget_in_child() -> None:
    """A forked copy of the caller starts its own forker if it renders: the socket it
    inherited is its parent's (closed here, so that forker still ends with the parent),
    and the lock may have been held at the fork."""
    global _forker, _forker_lock
    if _forker is not None:
        _forker._control.close()
    _forker, _forker_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


class TemplateProblem(RenderError):
    """A template that does not compile; ``template`` is its name."""

    def __init__(self, template: str, message: str, line: int | None) -> None:
        super().__init__(message, line)
        self.template = template


class Renderer:
    """Renders named templates in a process of its own (forked by this process's forker)
    with bounds of time and memory.

    Use as a context manager (or call :meth:`close`); one thread at a time. The process
    compiles the templates as it starts, so one that does not compile raises
    :class:`TemplateProblem` here, naming it and its line; :attr:`names` then holds the
    variables each template reads. A render that runs too long kills the process; the next
    render starts another.
    """

    def __init__(self, templates: dict[str, str], seconds: float | None = None) -> None:
        self.seconds = MAX_RENDER_SECONDS if seconds is None else seconds  # read at each start
        self._start = _Start(templates=templates).model_dump_json().encode("utf-8")
        self._forker: _Forker | None = None
        self._pid: int | None = None  # the rendering process, a child of self._forker
        self._channel: Connection | None = None
        self.names: dict[str, set[str]] = {}
        self._spawn()

    def _spawn(self) -> None:
        try:
            self._forker = _the_forker()
            self._pid, self._channel = self._forker.fork()
        except OSError:  # the forker ended (killed by the OS?): start another
            self._forker = _the_forker()
            self._pid, self._channel = self._forker.fork()
        self._channel.send_bytes(self._start)
        ready = _Ready.model_validate_json(self._answer("compiling", START_SECONDS))
        if ready.error is not None:
            self._stop()
            raise TemplateProblem(ready.template or "", ready.error.error or "", ready.error.line)
        self.names = {name: set(found) for name, found in ready.names.items()}

    def _answer(self, doing: str, seconds: float | None = None) -> bytes:
        """The process's next message, within the deadline (else it is stopped)."""
        seconds = seconds or self.seconds
        try:
            if not self._channel.poll(seconds):
                self._stop()
                raise RenderTimeout(
                    f"the template ran for more than {seconds:g} s {doing} (a loop too large?)"
                )
            return self._channel.recv_bytes()
        except (EOFError, OSError):  # the process died (killed by the OS?)
            self._stop()
            raise RenderLimit(f"the rendering process ended {doing} (out of memory?)") from None

    def render(self, name: str, context: dict[str, Any]) -> str:
        """The template ``name`` rendered with ``context`` (JSON-like values). A mapping,
        not keywords: its keys are a table's column names, ``name`` and ``self`` too.

        Raises:
            RenderTimeout: past :attr:`seconds` (the process was killed).
            RenderLimit: past the memory, size, repetition or range bounds.
            RenderError: any other failure of the template on this context.
        """
        if self._pid is None:
            self._spawn()
        call = _Call(name=name, context=context).model_dump_json().encode("utf-8")
        try:
            self._channel.send_bytes(call)
        except OSError:  # the process died (killed by the OS?)
            self._stop()
            raise RenderLimit("the rendering process ended on this row (out of memory?)") from None
        reply = _Reply.model_validate_json(self._answer("on this row"))
        if reply.error is not None:
            raise (RenderLimit if reply.limit else RenderError)(reply.error, reply.line)
        return reply.text or ""

    def _stop(self) -> None:
        if self._pid is None:
            return
        self._channel.close()
        try:
            self._forker.kill(self._pid)
        except OSError:  # its forker failed: the process is an orphan now, still ours to end
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, signal.SIGKILL)
        self._pid = self._channel = None

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    _fork_renderers(socket.socket(fileno=int(sys.argv[1])))
