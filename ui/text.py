"""Text from a file or a model shown as text: escaped for markdown sinks, or plain."""

from __future__ import annotations

import re
from typing import Any

from core.store.results import conversation

# Every ASCII punctuation mark markdown may read (CommonMark lets each be escaped), and $
# for Streamlit's LaTeX: escaped, a text from a file or a model shows as it is written.
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$&=\"'])")


def escape(text: object) -> str:
    """Untrusted text (an id, a file or model name, a message) made safe for a markdown
    sink such as a label, caption or alert: no link, image, HTML or formatting survives.
    Longer texts go to ``st.text`` or ``st.code`` instead, which never read markdown."""
    escaped = _MARKDOWN.sub(r"\\\1", " ".join(str(text).split()))
    # A bare address is made a link by GFM even with its punctuation escaped: an invisible
    # word joiner after the scheme's colon (and in www.) keeps it plain text.
    return escaped.replace("\\:", "\\:\u2060").replace("www\\.", "www\u2060\\.")


def show_conversation(container: Any, messages: Any, prompt: str | None = None) -> None:
    """Every turn of a request (the system prompt included), each as plain text."""
    for role, text in conversation(messages, prompt):
        container.caption(escape(role))
        container.text(text)
