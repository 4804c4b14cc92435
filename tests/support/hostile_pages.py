"""What the tests split from tests/pages/test_hostile_pages.py by kind share (docs/tests.md)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("studio_home")


IMAGE = "![pixel](http://127.0.0.1:9/pixel.png)"


LINK = "[click me](http://127.0.0.1:9/x)"


ROWS = [  # the failed one first: its error message is what Results shows on opening
    {"custom_id": "plain", "prompt": "hi", "answer": None,
     "error": ("engine_rejected", f"{LINK} {IMAGE}")},
    {"custom_id": LINK, "prompt": IMAGE, "answer": IMAGE + " **bold**", "metadata": {"k": LINK}},
]  # fmt: skip
