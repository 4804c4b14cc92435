"""The processes that render users' templates (core.plan.bounded_render): forked by one
forker per calling process, ended with it, and replaced when the OS kills the forker."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil

from core.plan import bounded_render
from core.plan.bounded_render import Renderer
from tests.support.bounds import run_bounded


def test_no_rendering_process_outlives_the_process_that_rendered():
    """A page's server or a worker that ends (here without closing its renderer) leaves no
    forker and no rendering process behind."""
    script = """
        import json, os
        import psutil
        from core.plan.bounded_render import Renderer
        renderer = Renderer({"t": "hi {{ name }}"})
        assert renderer.render("t", {"name": "Ada"}) == "hi Ada"
        ours = psutil.Process().children(recursive=True)
        print(json.dumps([p.pid for p in ours]))
        os._exit(0)  # no close, no clean-up: as a killed server would go
    """
    done = run_bounded(script, 60)
    assert done.returncode == 0, done.stderr
    left = json.loads(done.stdout.splitlines()[-1])
    assert len(left) == 2  # the forker and the rendering process it forked
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in left):
        assert time.monotonic() < deadline, f"still running 10 s after their caller: {left}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_forker_killed_by_the_os_is_replaced_and_templates_still_render():
    with Renderer({"t": "one {{ n }}"}) as before:
        assert before.render("t", {"n": 1}) == "one 1"
    forker = bounded_render._the_forker()
    os.kill(forker._process.pid, signal.SIGKILL)
    forker._process.wait()
    with Renderer({"t": "two {{ n }}"}) as after:  # no error: a new forker forks it
        assert after.render("t", {"n": 2}) == "two 2"
    assert bounded_render._the_forker() is not forker


def test_a_runaway_render_is_killed_and_the_next_row_renders():
    runaway = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}x"
    with Renderer({"slow": runaway, "quick": "{{ n }}"}, seconds=0.5) as renderer:
        killed = renderer._pid
        try:
            renderer.render("slow", {})
        except bounded_render.RenderTimeout as exc:
            assert "ran for more than 0.5 s on this row" in exc.message
        else:
            raise AssertionError("the runaway render returned")
        assert not _alive(killed)  # not left spinning on a core
        assert renderer.render("quick", {"n": 7}) == "7"
