"""A batch file for the Ray cluster tests."""

from __future__ import annotations

import json


def _batch(path, count):
    with path.open("w", encoding="utf-8") as out:
        for i in range(count):
            body = {
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": f"Name a colour. ({i})"}],
                "max_tokens": 8,
                "temperature": 0,
            }
            line = {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}) + "\n")
    return path
