"""One thread per store that indexes what people saved, a pass for many saves.

A save is durable once its line is in its file (``core.human.files``); the index follows.
Each save indexed on its own costs about six DuckDB statements (a transaction, the label's
rows, the file's offset), and eight reviewers saving a label a second each took that CPU
from an export running beside them. A save instead asks this thread (:meth:`soon`), which
waits :data:`EVERY` seconds after the first ask, so the saves of that while come in too,
then makes one sync for all of them: at most one a quarter second, however many save.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

EVERY = 0.25  # seconds a save waits to be indexed with others (the Review panel's next key
# draws meanwhile; a page run syncs at once, see Store.ingest_all)


class BackgroundSync:
    """Runs ``sync`` on a thread of its own, once for all the asks of ``every`` seconds.

    Each ask gets a ticket (a number that grows); :meth:`wait` waits for a pass that began
    after that ask, so what was saved before it is in the index (read your own writes).
    """

    def __init__(self, sync: Callable[[], None], every: float = EVERY, name: str = "sync"):
        self._sync, self._every, self._name = sync, every, name
        self._changed = threading.Condition()
        self._asked = 0  # tickets handed out
        self._done = 0  # tickets whose pass has ended
        self._failed = 0  # tickets whose pass raised (their lines wait for the next sync)
        self._stopped = False
        self._thread: threading.Thread | None = None

    def soon(self) -> int:
        """Asks for a sync of everything saved so far; returns the ask's ticket (0 once
        stopped: the next store's sync reads the files on)."""
        with self._changed:
            if self._stopped:
                return 0
            self._asked += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._changed.notify_all()
            return self._asked

    def wait(self, ticket: int | None = None, timeout: float | None = None) -> bool:
        """Waits until the pass for ``ticket`` (default: the last ask) ended; True when it
        indexed it, False after a failed pass, a ``timeout`` or :meth:`stop`."""
        with self._changed:
            # (a ticket past the last ask is another store's, one reopened: its last ask)
            ticket = self._asked if ticket is None else min(ticket, self._asked)
            if ticket <= 0:  # nothing asked yet; or a stopped store's ask, never met
                return not self._stopped
            self._changed.wait_for(lambda: self._done >= ticket or self._stopped, timeout)
            return self._done >= ticket and self._failed < ticket

    def stop(self) -> None:
        """Ends the thread after its pass in progress (asks not yet met stay in the files)."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._asked > self._done or self._stopped)
                # the saves of the next ``every`` seconds come in this pass too
                self._changed.wait_for(lambda: self._stopped, self._every)
                if self._stopped:
                    return
                covered = self._asked  # every line of these asks is in its file already
            try:
                self._sync()
            except Exception:  # the store closing, a file it cannot read: the next sync
                log.warning("%s: background pass failed", self._name, exc_info=True)
                failed = True
            else:
                failed = False
            with self._changed:
                self._done = covered
                # a pass that ends well indexes every line before it, a failed one's too
                self._failed = covered if failed else 0
                self._changed.notify_all()
