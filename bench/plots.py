"""Pictures of the benchmarks' figures, drawn from their own saved output.

`make bench` saves each benchmark's output under bench/results/ (`NAME.txt`); this script
reads the ones there and draws each as an SVG bar chart into docs/images/:

    .venv/bin/python bench/plots.py            # every output found
    python bench/throughput.py | tee bench/results/throughput.txt && python bench/plots.py

- throughput.txt (bench/throughput.py): requests/s of vLLM's LLM.chat, vLLM's run_batch
  (the peer) and `core run` on the same file -> docs/images/bench-throughput.svg
- warm.txt (bench/warm.py): submit to completion, cold against warm -> bench-warm.svg
- pages.txt (bench/pages.py): each page's first render and rerun at 1,000,000 results
  -> bench-pages.svg

A first line starting with "# " in a saved output is the chart's note (when and under what
load it was measured); without one the benchmark's own first line is.

Plain SVG written here, so drawing needs no plotting package.
"""

from __future__ import annotations

import re
import sys
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
IMAGES = ROOT / "docs" / "images"
COLOURS = ("#1f77b4", "#ff7f0e")

Bars = list[tuple[str, list[float]]]  # (label, one value per series)


def note_of(text: str, default: str) -> str:
    """The saved output's own "# " note line, else ``default``."""
    first = text.splitlines()[0] if text else ""
    return first[2:] if first.startswith("# ") else default


def throughput(text: str) -> tuple[str, Bars, list[str], str]:
    """bench/throughput.py's table: `path  median s  spread s  req/s  out tok/s`."""
    rows = re.findall(
        r"^(direct|run_batch|studio)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+$", text, re.M
    )
    names = {"direct": "vLLM LLM.chat", "run_batch": "vLLM run_batch (peer)", "studio": "core run"}
    head = note_of(text, text.splitlines()[0])
    return (
        "Requests/s on the same file (higher is better)",
        [(names[n], [float(v)]) for n, v in rows],
        ["requests/s"],
        head,
    )


def warm(text: str) -> tuple[str, Bars, list[str], str]:
    """bench/warm.py's table: one row per batch and temperature, seconds to completion."""
    rows = re.findall(r"^(\w+)\s+(\d+) line\(s\), (cold|warm)((?:\s+[\d.]+s)+)$", text, re.M)
    seconds: dict[str, dict[str, float]] = {}
    for kind, lines, state, times in rows:
        # first result, [the engine's own time,] completed, model load, running
        done = float(times.split()[-3].rstrip("s"))
        seconds.setdefault(f"{kind}, {lines} line{'s' * (lines != '1')}", {})[state] = done
    bars = [(label, [pair["cold"], pair["warm"]]) for label, pair in seconds.items()]
    head = note_of(text, text.splitlines()[0])
    return "Seconds from submit to a completed job (lower is better)", bars, ["cold", "warm"], head


def pages(text: str) -> tuple[str, Bars, list[str], str]:
    """bench/pages.py's Markdown table: page, job, cold, (figures drawn,) first render,
    rerun (ms)."""
    rows = re.findall(
        r"^\| (\w+)\.py \| (\w+) \| [\d,]+ (?:\| [\d,]+ )?\| ([\d,]+) \| ([\d,]+) \|$", text, re.M
    )
    bars = [
        (f"{page} ({job})", [float(first.replace(",", "")), float(rerun.replace(",", ""))])
        for page, job, first, rerun in rows
    ]
    head = note_of(text, "1,000,000 results; 200,000 running")
    return (
        "Page times in ms at 1,000,000 results (lower is better)",
        bars,
        ["first render", "rerun"],
        head,
    )


def svg(title: str, bars: Bars, series: list[str], note: str) -> str:
    """A horizontal bar chart, one group of bars per label, values written at their ends."""
    label_w, plot_w, bar_h, gap = 230, 520, 16, 10
    top = 60
    height = top + len(bars) * (len(series) * bar_h + gap) + 30
    most = max(v for _, values in bars for v in values) or 1.0
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 90}" '
        f'height="{height}" font-family="sans-serif" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="10" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
        f'<text x="10" y="38" fill="#555">{escape(note)}</text>',
    ]
    for i, name in enumerate(series if len(series) > 1 else []):
        x = label_w + i * 140
        out.append(f'<rect x="{x}" y="46" width="10" height="10" fill="{COLOURS[i]}"/>')
        out.append(f'<text x="{x + 14}" y="55">{escape(name)}</text>')
    y = top
    for label, values in bars:
        out.append(
            f'<text x="{label_w - 8}" y="{y + bar_h * len(values) / 2 + 4}" '
            f'text-anchor="end">{escape(label)}</text>'
        )
        for i, value in enumerate(values):
            width = max(1.0, plot_w * value / most)
            out.append(
                f'<rect x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h - 2}" '
                f'fill="{COLOURS[i]}"/>'
            )
            out.append(
                f'<text x="{label_w + width + 4:.1f}" y="{y + bar_h - 5}">{value:,.2f}</text>'
            )
            y += bar_h
        y += gap
    out.append("</svg>")
    return "\n".join(out) + "\n"


CHARTS = {"throughput": throughput, "warm": warm, "pages": pages}


def main() -> int:
    drawn = 0
    for name, read in CHARTS.items():
        source = RESULTS / f"{name}.txt"
        if not source.is_file():
            print(f"no {source.relative_to(ROOT)}: run bench/{name}.py first", file=sys.stderr)
            continue
        title, bars, series, note = read(source.read_text(encoding="utf-8"))
        if not bars:
            print(f"{source.relative_to(ROOT)} holds no figures to draw", file=sys.stderr)
            continue
        IMAGES.mkdir(parents=True, exist_ok=True)
        (IMAGES / f"bench-{name}.svg").write_text(svg(title, bars, series, note), encoding="utf-8")
        print(f"drew docs/images/bench-{name}.svg from {source.relative_to(ROOT)}")
        drawn += 1
    return 0 if drawn else 1


if __name__ == "__main__":
    raise SystemExit(main())
