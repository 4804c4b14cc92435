"""Values a UI process keeps between reruns (core/recent.py)."""

import threading

from core.recent import PENDING, Latest


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


def test_a_first_value_slower_than_the_wait_is_pending_then_ready():
    latest: Latest[str, int] = Latest(4)
    release = threading.Event()

    def slow() -> int:
        release.wait(10)
        return 7

    assert latest.get("charts", 1, slow, wait=0.01) == (PENDING, False)  # not waited for
    assert not latest.ready("charts")
    release.set()
    for _ in range(500):
        if latest.ready("charts"):
            break
        threading.Event().wait(0.01)
    assert latest.get("charts", 1, lambda: 0, wait=0.01) == (7, True)  # made once, kept


def test_a_first_value_whose_maker_fails_raises_in_the_page():
    latest: Latest[str, int] = Latest(4)

    def broken() -> int:
        raise ValueError("no such column")

    try:
        latest.get("pairs", 1, broken, wait=5)
    except ValueError as exc:
        assert "no such column" in str(exc)
    else:
        raise AssertionError("the maker's error was swallowed")
