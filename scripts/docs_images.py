"""Copies the browser tests' screenshots that the docs show into docs/images/, made small.

`make screenshots` runs the browser walk over the sample data (it writes every shot to
test-output/screenshots/), then this script. Run alone, it uses the shots already there:

    python scripts/docs_images.py [--from test-output/screenshots]

Each picture is a band of its page (1400 wide; most a window's worth from the title down,
some the part worth showing), scaled to 1000 pixels wide, in 256 colours: the docs' images
stay a few hundred kilobytes in all. The browser tests shoot a page once it has settled
(tests/support/browser.py `settle`), so no picture shows a page still drawing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "images"
WIDTH = 1000
TITLE = 40  # the page's title starts this many pixels below a shot's top
BAND = (TITLE, TITLE + 1000)  # a window's worth from the title, at the shot's own scale

# The pictures that keep another band of their page: (top, bottom) pixels of the shot.
BANDS = {
    "results": (TITLE, 1450),  # the README's first picture: the title down to the table
    "walk-1-sample": (TITLE, 1100),  # the table and the template, down to the preview
    "walk-2-check": (TITLE, 1165),  # the figures and the summary's tables
    "walk-3-run": (TITLE, 1440),  # the settings down to the Start run button
    "walk-5-results": (1430, 2339),  # one answer beside its conversation, and the export
    "check-broken-file": (TITLE, 1090),  # every problem with its line, and the verdict
    "experiments": (TITLE, 1560),  # the summary, the verdicts and the matrix's first rows
}
# docs/images/<name>.png <- test-output/screenshots/<shot>.png (names from
# tests/browser/test_browser.py)
PICTURES = {
    "walk-1-sample": "build_1_preview",
    "walk-2-check": "run_1_upload",
    "walk-3-run": "run_2_settings",
    "walk-4-monitor": "run_8_completed",
    "walk-5-results": "run_9_results",
    "build": "page_01_build",
    "upload-and-check": "page_02_upload_check",
    "check-broken-file": "check_broken_file",
    "run": "page_03_run",
    "monitor": "page_04_monitor",
    "results": "page_05_results",
    "review": "page_06_review",
    "checks": "checks_pass_rates",
    "compare": "page_08_compare",
    "dashboards": "page_09_dashboards",
    "jobs": "page_10_jobs",
    "settings": "page_11_settings",
    "experiments": "page_12_experiments",
}


def shrink(source: Path, target: Path, band: tuple[int, int] = BAND) -> None:
    """The ``band`` (top, bottom) of a full-page shot, scaled to WIDTH, in 256 colours."""
    with Image.open(source) as image:
        bottom = min(band[1], image.height)
        part = image.convert("RGB").crop((0, min(band[0], bottom - 1), image.width, bottom))
    small = part.resize((WIDTH, round(part.height * WIDTH / part.width)), Image.Resampling.LANCZOS)
    small.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--from", dest="source", type=Path, default=ROOT / "test-output" / "screenshots"
    )
    args = parser.parse_args()
    missing = [shot for shot in PICTURES.values() if not (args.source / f"{shot}.png").is_file()]
    if missing:
        print(
            f"missing in {args.source}: {', '.join(missing)} (run the browser tests)",
            file=sys.stderr,
        )
        return 1
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, shot in PICTURES.items():
        shrink(args.source / f"{shot}.png", TARGET / f"{name}.png", BANDS.get(name, BAND))
    total = sum(path.stat().st_size for path in TARGET.glob("*.png"))
    print(f"wrote {len(PICTURES)} pictures into {TARGET} ({total / 1e6:.1f} MB in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
