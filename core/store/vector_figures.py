"""The Results page's map of a job's vectors: a plotly scatter of :func:`vector_map`'s
points, coloured by a metadata field, each point's text in its hover.

Texts are data: plotly reads a subset of HTML in hover texts and legend names (``<a
href>``, ``<b>``, ``<br>``...), so every text from a job is HTML-escaped before it goes in
(plotly then shows ``&lt;b&gt;`` as the characters ``<b>``, never as markup); the only tag
is our own ``<br>`` between lines.
"""

from __future__ import annotations

import html
import json
import textwrap
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from core.store.vectors import VectorMap

HOVER_CHARS = 280  # of each text, in the hover box
HOVER_WIDTH = 70  # characters per hover line
MAX_COLOURS = 12  # the most frequent values each get a colour; the rest share "other"
# Past this many points the scatter is drawn by WebGL: SVG slows down beyond a few thousand.
WEBGL_FROM = 5_000
NO_VALUE = "(none)"
OTHER = "(other)"


def _metadata(points: pd.DataFrame) -> list[dict[str, Any]]:
    parsed = []
    for raw in points.get("metadata", []):
        try:
            value = json.loads(raw) if isinstance(raw, str) else None
        except ValueError:
            value = None
        parsed.append(value if isinstance(value, dict) else {})
    return parsed


def metadata_fields(points: pd.DataFrame) -> list[str]:
    """The metadata keys the map's points carry, sorted."""
    return sorted({key for meta in _metadata(points) for key in meta})


def point_values(points: pd.DataFrame, field: str) -> list[str]:
    """Each point's value of a metadata field, as text. A list with a value per input of
    the request (a line of several rows, see core.plan.embed_builder) gives each input its
    own; a missing value is ``(none)``."""
    values = []
    for meta, index in zip(_metadata(points), points["input_index"], strict=True):
        value = meta.get(field)
        if isinstance(value, list):
            value = value[int(index)] if 0 <= int(index) < len(value) else None
        if value is None:
            values.append(NO_VALUE)
        elif isinstance(value, str):
            values.append(value)
        else:
            values.append(json.dumps(value, ensure_ascii=False))
    return values


def hover_text(custom_id: str, input_index: int, text: Any) -> str:
    """One point's hover: its id and the start of its text, escaped, wrapped by ``<br>``."""
    if not isinstance(text, str):
        body = ["(no text: the input was token ids)"]
    else:
        short = text if len(text) <= HOVER_CHARS else text[:HOVER_CHARS] + "…"
        body = textwrap.wrap(" ".join(short.split()), HOVER_WIDTH) or ["(empty)"]
    head = f"{custom_id} [{input_index}]" if input_index else str(custom_id)
    return "<br>".join(html.escape(line, quote=False) for line in [head, *body])


def map_figure(vmap: VectorMap, colour_by: str | None = None) -> go.Figure:
    """The scatter of the map's points; one trace (and legend entry) per value of
    ``colour_by``, the :data:`MAX_COLOURS` most frequent values each with their own."""
    points = vmap.points
    hovers = [
        hover_text(c, int(i), t)
        for c, i, t in zip(points["custom_id"], points["input_index"], points["text"], strict=True)
    ]
    scatter = go.Scattergl if len(points) >= WEBGL_FROM else go.Scatter
    figure = go.Figure()
    if colour_by:
        values = pd.Series(point_values(points, colour_by), index=points.index)
        top = values.value_counts().index[:MAX_COLOURS]
        values = values.where(values.isin(top), OTHER)
        groups = [*top, OTHER] if (values == OTHER).any() else list(top)
    else:
        values, groups = pd.Series("points", index=points.index), ["points"]
    for group in groups:
        chosen = (values == group).to_numpy()
        figure.add_trace(
            scatter(
                x=points["x"].to_numpy()[chosen],
                y=points["y"].to_numpy()[chosen],
                mode="markers",
                marker={"size": 6 if len(points) < WEBGL_FROM else 4, "opacity": 0.75},
                name=html.escape(str(group), quote=False)[:60],
                hovertext=[h for h, keep in zip(hovers, chosen, strict=True) if keep],
                hoverinfo="text",
            )
        )
    first, second = vmap.explained
    figure.update_layout(
        xaxis_title=f"PC1 ({first:.0%} of the variance)",
        yaxis_title=f"PC2 ({second:.0%})",
        showlegend=bool(colour_by),
        legend_title_text=html.escape(colour_by or "", quote=False),
        margin={"l": 10, "r": 10, "t": 30, "b": 10},
        height=520,
    )
    return figure
