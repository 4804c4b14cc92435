"""Rows found by a value of theirs (an id, a reuse key) without an object per row.

A dict of a million ids or keys costs about 0.1 KiB an entry on top of the strings or
bytes it keeps; the plan of a run already keeps each row's value in compact columns, so
a table of row numbers is all a lookup needs: 8 to 16 B a row.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable


class RowTable:
    """An open-addressing table of row numbers by their value's hash, at most half full
    (4 B a slot). A find compares the value of each row it meets (``value_of``), so it is
    exact however values' hashes collide.

    Args:
        rows: the most rows it will hold.
        value_of: a row's value, read from wherever the rows keep it.
    """

    def __init__(self, rows: int, value_of: Callable[[int], Hashable]) -> None:
        size = 8
        while size < 2 * rows:
            size *= 2
        self._slots = array("I", [0]) * size  # row + 1 (0: empty)
        self._mask = size - 1
        self._room = rows
        self._value_of = value_of

    def add(self, row: int) -> None:
        """Holds ``row``, whose value the table does not hold yet."""
        if not self._room:
            raise OverflowError("the table holds no more rows than it was made for")
        self._room -= 1
        slots, mask = self._slots, self._mask
        slot = hash(self._value_of(row)) & mask
        while slots[slot]:
            slot = (slot + 1) & mask
        slots[slot] = row + 1

    def find(self, value: Hashable) -> int | None:
        """The row whose value is ``value`` (None: none held)."""
        slots, mask, value_of = self._slots, self._mask, self._value_of
        slot = hash(value) & mask
        while found := slots[slot]:
            if value_of(found - 1) == value:
                return found - 1
            slot = (slot + 1) & mask
        return None
