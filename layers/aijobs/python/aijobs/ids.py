"""Identifiers: time-ordered job ids and random API keys."""

from __future__ import annotations

import secrets
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_job_id(now_ms: int | None = None) -> str:
    """A ULID-style id: 48-bit millisecond time + 80 random bits, Crockford base32, 26 chars.

    Ids sort by creation time, so a user's jobs list newest first straight from the table key.
    """
    millis = int(time.time() * 1000) if now_ms is None else now_ms
    value = (millis << 80) | secrets.randbits(80)
    chars = []
    for _ in range(26):
        value, index = divmod(value, 32)
        chars.append(_CROCKFORD[index])
    return "".join(reversed(chars))


def new_api_key() -> str:
    """A bearer key with 256 bits of entropy; only its SHA-256 is ever stored."""
    return "aj_" + secrets.token_urlsafe(32)
