"""A few values kept by key, the most recently used first to stay: what a UI process keeps
between a page's reruns (a job's ledger, a file's check report, a job's samples)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")


class Recent(Generic[K, V]):
    """Up to ``size`` values by key; the least recently used goes first. Thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: K, value: V) -> V:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()`` (made outside the lock), kept."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        return self.put(key, make())


class Latest(Generic[K, V]):
    """Values that follow a version which moves on by itself (results streaming in): once a
    key has a value, a newer version's value is made in a background thread while the one
    made before is returned at once, so a page over a running job redraws without waiting
    for figures over a million results. A key seen for the first time is made in a
    background thread too, waited for up to ``wait`` seconds (None: as long as it takes);
    past that there is no value yet (:data:`PENDING`) until it is made. Up to ``size``
    keys are kept."""

    def __init__(self, size: int) -> None:
        self._made: Recent[K, tuple[object, V]] = Recent(size)
        self._making: dict[K, threading.Event] = {}
        self._failed: dict[K, Exception] = {}  # a first value's maker raised: the page says why
        self._lock = threading.Lock()

    def get(
        self, key: K, version: object, make: Callable[[], V], wait: float | None = None
    ) -> tuple[V, bool]:
        """The value of ``key`` and whether it is of ``version`` (False: an older one, while
        ``make`` runs in the background for this one). A first value not made within
        ``wait`` seconds is returned as (:data:`PENDING`, False)."""
        kept = self._made.get(key)
        if kept is not None and kept[0] == version:
            return kept[1], True
        if kept is None:
            self._raise_failure(key)
        done = self._start(key, version, make)
        if kept is not None:
            return kept[1], False
        done.wait(wait)
        self._raise_failure(key)
        kept = self._made.get(key)
        if kept is None:
            return PENDING, False  # type: ignore[return-value]
        return kept[1], kept[0] == version

    def _raise_failure(self, key: K) -> None:
        with self._lock:
            failed = self._failed.pop(key, None)
        if failed is not None:
            raise failed

    def ready(self, key: K) -> bool:
        """Whether ``key`` has a value (of any version), or its first maker failed."""
        with self._lock:
            if key in self._failed:
                return True
        return self._made.get(key) is not None

    def _start(self, key: K, version: object, make: Callable[[], V]) -> threading.Event:
        """Starts making ``key``'s value unless it is being made; its end is set when done."""
        with self._lock:
            if key in self._making:
                return self._making[key]
            done = self._making[key] = threading.Event()
        threading.Thread(target=self._make, args=(key, version, make, done), daemon=True).start()
        return done

    def _make(self, key: K, version: object, make: Callable[[], V], done: threading.Event) -> None:
        try:
            self._made.put(key, (version, make()))
        except Exception as exc:  # a first value's caller raises it; a later one retries
            log.exception("making %r failed", key)
            if self._made.get(key) is None:
                with self._lock:
                    self._failed[key] = exc
        finally:
            with self._lock:
                self._making.pop(key, None)
            done.set()

    def clear(self) -> None:
        self._made = Recent(self._made.size)


PENDING: object = object()
"""What :meth:`Latest.get` returns for a value that is still being made for the first time."""
