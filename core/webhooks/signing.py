"""The Standard Webhooks signature that the openai SDK's ``webhooks.unwrap`` checks.

The signed text is ``{webhook-id}.{webhook-timestamp}.{body}``; its HMAC-SHA256, under the
secret's bytes (the base64 after ``whsec_``), goes in ``webhook-signature`` as
``v1,<base64>``, one per secret, separated by spaces (a receiver accepts any that matches:
the old secret signs beside the new one while a rotation settles).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    """A ``whsec_`` secret of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def _key(secret: str) -> bytes:
    """The secret's bytes, as the openai SDK reads them."""
    if secret.startswith(SECRET_PREFIX):
        return base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    return secret.encode()


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(
    secrets_: list[str], message_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The headers of one delivery attempt: signed now (a receiver refuses a timestamp more
    than 5 minutes old, so each retry signs again), by every secret given."""
    return {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(signature(s, message_id, timestamp, body) for s in secrets_),
    }
