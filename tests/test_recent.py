"""Values a UI process keeps between reruns (core/recent.py)."""

import threading

from core.recent import Latest


def test_a_value_behind_the_version_is_shown_at_once_while_the_next_is_made_aside():
    latest: Latest[str, int] = Latest(4)
    assert latest.get("charts", 1, lambda: 10) == (10, True)  # first: made here, waited for
    assert latest.get("charts", 1, lambda: 99) == (10, True)  # same version: kept

    release, made = threading.Event(), threading.Event()

    def slow() -> int:  # figures over a million results
        release.wait(10)
        made.set()
        return 20

    assert latest.get("charts", 2, slow) == (10, False)  # the older value, not waiting
    assert latest.get("charts", 2, slow) == (10, False)  # one maker at a time
    release.set()
    assert made.wait(10)
    for _ in range(100):  # the maker's thread stores it just after it returns
        value = latest.get("charts", 2, lambda: 0)
        if value == (20, True):
            break
        threading.Event().wait(0.01)
    assert value == (20, True)
