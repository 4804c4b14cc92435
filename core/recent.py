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
    for figures over a million results. A key seen for the first time is made in the
    caller's thread. Up to ``size`` keys are kept."""

    def __init__(self, size: int) -> None:
        self._made: Recent[K, tuple[object, V]] = Recent(size)
        self._making: set[K] = set()
        self._lock = threading.Lock()

    def get(self, key: K, version: object, make: Callable[[], V]) -> tuple[V, bool]:
        """The value of ``key`` and whether it is of ``version`` (False: an older one, while
        ``make`` runs in the background for this one)."""
        kept = self._made.get(key)
        if kept is None:
            return self._made.put(key, (version, make()))[1], True
        made_version, value = kept
        if made_version == version:
            return value, True
        with self._lock:
            if key in self._making:
                return value, False
            self._making.add(key)
        threading.Thread(target=self._make, args=(key, version, make), daemon=True).start()
        return value, False

    def _make(self, key: K, version: object, make: Callable[[], V]) -> None:
        try:
            self._made.put(key, (version, make()))
        except Exception:  # the next rerun tries again, in its own thread, and shows why
            log.exception("refreshing %r failed", key)
        finally:
            with self._lock:
                self._making.discard(key)

    def clear(self) -> None:
        self._made = Recent(self._made.size)
