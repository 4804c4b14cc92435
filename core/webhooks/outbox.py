"""The outbox of webhook events and the dispatcher that sends them.

A job's end writes one small file, ``webhooks/outbox/<event id>.json`` (atomically), and
nothing else: no send happens where a job ends, so a dead or slow endpoint never delays a
job, the worker or a page. The event's id comes from the job and its end, so the same end
written twice is one event; a job resumed and ended again is another.

One dispatcher sends, whoever holds ``webhooks/dispatcher.lock`` (an ``flock``, dropped by
the kernel when its holder dies). Whoever records an event starts one when none holds it:
``python -m core webhooks deliver``, a process of its own (its own session: it outlives
the worker, the CLI command or the server that started it), which sends what is due,
sleeps until the next retry, and exits when the outbox is empty. So events go out whether
the studio's server runs or only the CLI is used. Each attempt is signed afresh
(core/webhooks/signing.py); a non-2xx answer, a redirect or a timeout is retried after
``RETRY_DELAYS`` for up to 72 h; a delivery's success is written before anything else is
sent, so an event is delivered at most once by the one dispatcher. An event done with
(delivered, or given up) moves to ``webhooks/log/``: the delivery log Settings shows.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ValidationError

from core.config import REPO_ROOT
from core.files import write_atomic
from core.schemas import JobStatus
from core.webhooks.registry import (
    Endpoint,
    EventType,
    has_endpoints,
    read_endpoints,
    webhooks_dir,
)
from core.webhooks.signing import signed_headers

log = logging.getLogger(__name__)

# Seconds before each retry after a failed attempt (the last repeats), as Standard
# Webhooks suggests; an event is given up 72 h after it was recorded.
RETRY_DELAYS: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000)
GIVE_UP_AFTER = 72 * 3600
SEND_TIMEOUT = 15.0  # seconds an endpoint has to answer; then it counts as failed
POLL_SECONDS = 2.0  # how often a running dispatcher looks for new events


class EventData(BaseModel):
    id: str  # the batch's id, as the Batch API shows it (the job's id)


class WebhookEvent(BaseModel):
    """OpenAI's event body (``openai.types.webhooks.BatchCompletedWebhookEvent`` and kin)."""

    id: str
    object: Literal["event"] = "event"
    type: EventType
    created_at: int
    data: EventData


class Delivery(BaseModel):
    """One event's sending to one endpoint."""

    endpoint_id: str
    url: str
    attempts: int = 0
    next_at: float  # epoch seconds: when the next attempt is due
    last: str = ""  # the last attempt's answer: "HTTP 200", "connection refused"...
    delivered_at: float | None = None
    gave_up_at: float | None = None

    @property
    def done(self) -> bool:
        return self.delivered_at is not None or self.gave_up_at is not None

    @property
    def state(self) -> str:
        if self.delivered_at is not None:
            return "delivered"
        return "given up" if self.gave_up_at is not None else "pending"


class OutboxEntry(BaseModel):
    """One event file: the event and its deliveries (one per endpoint that wants it)."""

    event: WebhookEvent
    recorded_at: float
    deliveries: list[Delivery]

    @property
    def done(self) -> bool:
        return all(d.done for d in self.deliveries)


def outbox_dir(home: Path) -> Path:
    return webhooks_dir(home) / "outbox"


def log_dir(home: Path) -> Path:
    return webhooks_dir(home) / "log"


def lock_file(home: Path) -> Path:
    return webhooks_dir(home) / "dispatcher.lock"


def event_id(batch_id: str, status: JobStatus) -> str:
    """The id of a job's end: the same for the same end written twice."""
    key = f"{batch_id}|{status.state.value}|{status.finished_at}"
    return "evt_" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _epoch(iso: str | None) -> int:
    try:
        return int(datetime.fromisoformat(iso).timestamp()) if iso else int(time.time())
    except ValueError:
        return int(time.time())


def record_end(home: Path, batch_id: str, status: JobStatus) -> None:
    """Records a job's end in the outbox for every endpoint that wants it, and starts a
    dispatcher when none runs. Never sends, never raises: a job's end must not fail for
    a webhook (a problem is logged)."""
    if not status.is_final or not has_endpoints(home):
        return
    try:
        _record(home, batch_id, status)
    except (OSError, ValueError) as exc:
        log.warning("webhook event of %s not recorded: %s", batch_id, exc)


def _record(home: Path, batch_id: str, status: JobStatus) -> None:
    kind = f"batch.{status.state.value}"
    wanted = [e for e in read_endpoints(home) if kind in e.events]
    name = f"{event_id(batch_id, status)}.json"
    if not wanted or (outbox_dir(home) / name).exists() or (log_dir(home) / name).exists():
        return
    now = time.time()
    event = WebhookEvent(
        id=name.removesuffix(".json"),
        type=kind,  # type: ignore[arg-type]  # one of the four final states
        created_at=_epoch(status.finished_at),
        data=EventData(id=batch_id),
    )
    deliveries = [Delivery(endpoint_id=e.id, url=e.url, next_at=now) for e in wanted]
    entry = OutboxEntry(event=event, recorded_at=now, deliveries=deliveries)
    write_atomic(outbox_dir(home) / name, entry.model_dump_json(indent=1))
    start_dispatcher(home)


def _entries(folder: Path) -> Iterator[tuple[Path, OutboxEntry]]:
    try:
        paths = sorted(p for p in folder.iterdir() if p.suffix == ".json")
    except FileNotFoundError:
        return
    for path in paths:
        try:
            yield path, OutboxEntry.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:  # removed meanwhile, or damaged
            log.warning("webhook event %s not read: %s", path.name, exc)


def pending_events(home: Path) -> list[OutboxEntry]:
    return [entry for _, entry in _entries(outbox_dir(home))]


def delivery_log(home: Path, limit: int = 100) -> list[dict[str, object]]:
    """The newest deliveries, pending and done, as rows for a table (Settings)."""
    entries = [e for _, e in _entries(outbox_dir(home))] + [e for _, e in _entries(log_dir(home))]
    entries.sort(key=lambda e: e.recorded_at, reverse=True)
    return [
        {
            "event": entry.event.id,
            "type": entry.event.type,
            "batch": entry.event.data.id,
            "endpoint": delivery.url,
            "state": delivery.state,
            "attempts": delivery.attempts,
            "last answer": delivery.last,
            "recorded": datetime.fromtimestamp(entry.recorded_at).isoformat(timespec="seconds"),
        }
        for entry in entries
        for delivery in entry.deliveries
    ][:limit]


@cache
def _opener() -> Any:
    """The opener every delivery takes, built at the first: urllib's HTTP client (and ssl)
    load then, not with every ``python -m core`` command (about 40 ms of CPU)."""
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None  # a 3xx is an answer that is not 2xx: retried, never followed

    # No proxy from the environment: an endpoint is called directly, loopback included.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())


def send(endpoint: Endpoint, body: bytes, message_id: str, timeout: float) -> str | None:
    """Posts ``body`` to ``endpoint`` signed now; None on a 2xx answer, else what failed."""
    headers = signed_headers(
        endpoint.signing_secrets(time.time()), message_id, int(time.time()), body
    )
    import urllib.error
    import urllib.request

    request = urllib.request.Request(endpoint.url, data=body, headers=headers, method="POST")
    try:
        with _opener().open(request, timeout=timeout) as answer:
            return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return f"no answer in {timeout:g} s"
        return str(getattr(reason, "strerror", None) or reason)
    except TimeoutError:
        return f"no answer in {timeout:g} s"
    except (OSError, ValueError) as exc:
        return str(exc)


class Dispatcher:
    """Sends the outbox's due deliveries. ``delays`` (seconds before each retry) and
    ``give_up_after`` are given by tests to take seconds instead of hours."""

    def __init__(
        self,
        home: Path,
        delays: Sequence[float] = RETRY_DELAYS,
        give_up_after: float = GIVE_UP_AFTER,
        timeout: float = SEND_TIMEOUT,
    ) -> None:
        self.home, self.delays, self.give_up_after = home, tuple(delays), give_up_after
        self.timeout = timeout

    def step(self) -> float | None:
        """Sends every delivery that is due; returns when the next one is due (None: the
        outbox is empty)."""
        endpoints = {e.id: e for e in read_endpoints(self.home)}
        due: list[float] = []
        for path, entry in _entries(outbox_dir(self.home)):
            body = entry.event.model_dump_json().encode()
            for delivery in entry.deliveries:
                if delivery.done or delivery.next_at > time.time():
                    continue
                endpoint = endpoints.get(delivery.endpoint_id)
                if endpoint is None:
                    delivery.last, delivery.gave_up_at = "endpoint removed", time.time()
                else:
                    self._attempt(entry, delivery, endpoint, body)
                write_atomic(path, entry.model_dump_json(indent=1))  # before the next send
            if entry.done:
                write_atomic(log_dir(self.home) / path.name, entry.model_dump_json(indent=1))
                path.unlink(missing_ok=True)
            else:
                due += [d.next_at for d in entry.deliveries if not d.done]
        return min(due) if due else None

    def _attempt(
        self, entry: OutboxEntry, delivery: Delivery, endpoint: Endpoint, body: bytes
    ) -> None:
        failed = send(endpoint, body, entry.event.id, self.timeout)
        delivery.attempts += 1
        now = time.time()
        if failed is None:
            delivery.last, delivery.delivered_at = "delivered (2xx)", now
            return
        delay = self.delays[min(delivery.attempts - 1, len(self.delays) - 1)]
        delivery.last, delivery.next_at = failed, now + delay
        if delivery.next_at - entry.recorded_at > self.give_up_after:
            delivery.gave_up_at = now
            delivery.last = f"{failed}; given up after {self.give_up_after / 3600:g} h"


@contextmanager
def dispatcher_lock(home: Path) -> Iterator[IO[bytes] | None]:
    """Yields the held lock's handle, or None when another dispatcher holds it."""
    path = lock_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield handle  # released when the handle closes


def deliver(
    home: Path,
    dispatcher: Dispatcher | None = None,
    stop: threading.Event | None = None,
    poll: float = POLL_SECONDS,
) -> bool:
    """Runs the dispatcher until the outbox is empty (or ``stop`` is set); False when
    another dispatcher holds the lock (it sends them)."""
    dispatcher = dispatcher or Dispatcher(home)
    stop = stop or threading.Event()
    ran = False
    while not stop.is_set():
        with dispatcher_lock(home) as held:
            if held is None:
                return ran
            ran = True
            while not stop.is_set() and (due := dispatcher.step()) is not None:
                stop.wait(min(max(due - time.time(), 0.05), poll))
        # Lock dropped: an event recorded while it was held started no dispatcher, so
        # look once more before leaving.
        if not pending_events(home):
            return ran
    return ran


def start_dispatcher(home: Path) -> None:
    """Starts ``python -m core webhooks deliver`` for ``home`` unless a dispatcher runs."""
    with dispatcher_lock(home) as held:
        if held is None:
            return
    with (webhooks_dir(home) / "dispatcher.log").open("ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "core", "webhooks", "deliver"],
            cwd=REPO_ROOT,
            env={**os.environ, "BATCH_STUDIO_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,  # not stopped with the worker or the terminal
        )
    threading.Thread(target=child.wait, daemon=True).start()  # reaped, never a zombie
