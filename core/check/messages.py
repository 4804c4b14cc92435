"""The ``messages`` of a chat body (or a Responses ``input`` list): roles, text content,
the order of turns, and the tool turns (:mod:`core.check.tools`)."""

from __future__ import annotations

from typing import Any

from core.check.sampling import RequestError
from core.check.tools import tool_turn

ROLES = ("system", "developer", "user", "assistant", "tool")
LEADING_ROLES = ("system", "developer")


TEXT_PART_TYPES = ("text", "input_text", "output_text")


def _message_text(index: int, content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in TEXT_PART_TYPES:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(
                    f"messages[{index}].content has a {kind!r} part; the model reads text only"
                )
            if not isinstance(part.get("text"), str):
                raise RequestError(f"messages[{index}].content text part has no string 'text'")
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(
        f"messages[{index}].content must be a string or a list of text parts, got "
        f"{type(content).__name__}"
    )


def role_order_warnings(roles: list[str]) -> list[str]:
    """Warnings for orders most chat templates handle badly (not fatal)."""
    warnings = []
    started = False
    for index, role in enumerate(roles):
        if role in LEADING_ROLES:
            if started:
                warnings.append(
                    f"messages[{index}] is a {role} message after the conversation started; "
                    "most chat templates expect instructions first"
                )
        else:
            started = True
    return warnings


def parse_messages(messages: Any, field_name: str = "body.messages") -> list[dict[str, str]]:
    """Checks a ``messages`` list and returns it with plain-text content.

    An assistant message's ``tool_calls`` become text after its content (the JSON of the
    calls, as :func:`core.check.tools.call_text` writes it), so the model sees them; a
    ``tool`` message keeps its role and must answer one of those calls.

    Raises:
        RequestError: empty or malformed messages, an unknown role, non-text content, no
            user message, or a conversation that ends with the assistant.
    """
    if not isinstance(messages, list) or not messages:
        raise RequestError(f"{field_name} must be a non-empty list of messages")
    parsed = []
    call_ids: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(f"messages[{index}] must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(f"messages[{index}].role is {role!r}; use one of {', '.join(ROLES)}")
        shown = tool_turn(index, message, call_ids)
        if shown is not None:  # an assistant's tool calls, after what it said
            said = message.get("content")
            text = _message_text(index, said) + "\n" + shown if said else shown
            parsed.append({"role": role, "content": text})
            continue
        if "content" not in message or message["content"] is None:
            raise RequestError(f"messages[{index}] ({role}) has no content")
        parsed.append({"role": role, "content": _message_text(index, message["content"])})
    _check_turns([m["role"] for m in parsed], field_name)
    return parsed


def _check_turns(roles: list[str], field_name: str) -> None:
    if "user" not in roles:
        raise RequestError(f"{field_name} has no user message")
    if roles[-1] == "assistant":
        raise RequestError(f"{field_name} ends with an assistant message; end with the user's turn")
