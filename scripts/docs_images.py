"""Copies the browser tests' screenshots that the docs show into docs/images/, made small.

`make screenshots` runs the browser walk over the sample data (it writes every shot to
test-output/screenshots/), then this script. Run alone, it uses the shots already there:

    python scripts/docs_images.py [--from test-output/screenshots]

Each picture is a window's worth of its page (1400x1000, most from the title down), scaled
to 1000 pixels wide, in 256 colours: the docs' images stay a few hundred kilobytes in all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "docs" / "images"
WIDTH = 1000
HEIGHT = 1000  # pixels of the page kept, at the shot's own scale

# docs/images/<name>.png <- test-output/screenshots/<shot>.png (tests/test_browser.py's names),
# from this many pixels below the page's top (the title, or the part worth showing)
FROM = {"walk-5-results": 1300, "results": 900}
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
}


def shrink(source: Path, target: Path, start: int = 40) -> None:
    """HEIGHT pixels of a full-page shot from ``start``, scaled to WIDTH, in 256 colours."""
    with Image.open(source) as image:
        start = max(0, min(start, image.height - HEIGHT))
        top = image.convert("RGB").crop((0, start, image.width, min(image.height, start + HEIGHT)))
    small = top.resize((WIDTH, round(top.height * WIDTH / top.width)), Image.Resampling.LANCZOS)
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
        shrink(args.source / f"{shot}.png", TARGET / f"{name}.png", FROM.get(name, 40))
    total = sum(path.stat().st_size for path in TARGET.glob("*.png"))
    print(f"wrote {len(PICTURES)} pictures into {TARGET} ({total / 1e6:.1f} MB in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
