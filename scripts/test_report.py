"""What `scripts/test.sh` prints at the end: each phase's wall time and the 30 slowest tests.

    python scripts/test_report.py REPORTS_DIR NAME=SECONDS...

REPORTS_DIR holds one JUnit XML per phase (pytest --junitxml); a test's time there is its
setup, call and teardown together, as a run waits for them.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 30


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def main(reports: Path, timings: list[str]) -> None:
    tests: list[tuple[float, str]] = []
    for report in sorted(reports.glob("*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            tests.append((float(case.get("time", 0)), name))
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


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
