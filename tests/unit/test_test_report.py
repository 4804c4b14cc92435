"""What `make test` prints at its end about its workers (scripts/test_report.py): how long
each was busy and when its last test ended, so a worker idling at a phase's end shows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "test_report.py"


def case(name: str, worker: str, started: float, seconds: float) -> str:
    return (
        f'<testcase classname="tests.unit.test_x" name="{name}" time="{seconds}"><properties>'
        f'<property name="worker" value="{worker}" /><property name="started" value="{started}" />'
        "</properties></testcase>"
    )


def test_each_workers_busy_time_and_its_last_end_are_said(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("test_report", SCRIPT)
    assert spec and spec.loader
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    xml = tmp_path / "parallel.xml"
    cases = [case("a", "gw0", 1000.0, 30.0), case("b", "gw0", 1040.0, 20.0)]
    cases += [case("c", "gw1", 1001.0, 95.5)]
    xml.write_text(f"<testsuites><testsuite>{''.join(cases)}</testsuite></testsuites>")

    assert report.workers(xml) == [
        "    gw0: busy 0 min 50.0 s, last test ended 1 min 00.0 s in",
        "    gw1: busy 1 min 35.5 s, last test ended 1 min 36.5 s in",
    ]
