"""The rows of the finished job the results tests read."""

from __future__ import annotations

ROWS = [
    {
        "custom_id": "a",
        "prompt": "Say 100% yes",
        "answer": "yes",
        "tokens": 1,
        "metadata": {"label": "pos", "prompt_version": "v1"},
    },
    {
        "custom_id": "b",
        "prompt": "it's a 'quote'; DROP TABLE results; --",
        "answer": None,
        "metadata": {"label": "neg", "prompt_version": "v1"},
    },
    {
        "custom_id": "c",
        "prompt": "regex .* [a-z]+ (x|y)",
        "answer": "<b>bold</b>\x07 end",
        "finish": "length",
        "tokens": 8,
        "latency_ms": 2500,
        "metadata": {"label": "neg", "prompt_version": "v2"},
    },
    {"custom_id": "d", "prompt": "under_score", "answer": "The Answer", "tokens": 4},
]
