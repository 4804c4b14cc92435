"""What `scripts/test.sh` prints at the end: each phase's wall time and the 30 slowest tests.

    python scripts/test_report.py REPORTS_DIR NAME=SECONDS...

REPORTS_DIR holds one JUnit XML per phase (pytest --junitxml); a test's time there is its
setup, call and teardown together, as a run waits for them. Where the tests' properties
say which worker ran each and when it started (tests/conftest.py), it also prints each
worker's busy time and when its last test ended: a worker that ends long before the other
idled while it finished.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

SLOWEST = 30


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def workers(report: Path) -> list[str]:
    """Each worker's busy time and the end of its last test, from the phase's first start."""
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for case in ET.parse(report).getroot().iter("testcase"):
        found = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "worker" in found and "started" in found:
            spans[found["worker"]].append((float(found["started"]), float(case.get("time", 0))))
    if not spans:
        return []
    first = min(start for runs in spans.values() for start, _ in runs)
    return [
        f"    {worker}: busy {minutes(sum(t for _, t in runs))}, "
        f"last test ended {minutes(max(s + t for s, t in runs) - first)} in"
        for worker, runs in sorted(spans.items())
    ]


def main(reports: Path, timings: list[str]) -> None:
    tests: list[tuple[float, str]] = []
    busy: list[str] = []
    for report in sorted(reports.glob("*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            tests.append((float(case.get("time", 0)), name))
        lines = workers(report)
        if len(lines) > 1:
            busy += [f"  {report.stem}:", *lines]
    print(f"\n{SLOWEST} slowest tests (setup, call and teardown):")
    for seconds, name in sorted(tests, reverse=True)[:SLOWEST]:
        print(f"{seconds:8.1f} s  {name}")
    print("\nwall time per phase:")
    total = 0.0
    for timing in timings:
        name, seconds = timing.split("=")
        total += float(seconds)
        print(f"  {name:12} {minutes(float(seconds))}")
    print(f"  {'in all':12} {minutes(total)}")
    if busy:
        print("\nthe workers of each phase:")
        print("\n".join(busy))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
