"""The signature a receiver verifies: Stripe's scheme, under aijobs' own header names.

`Aijobs-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>`, with one `v1`
per valid secret (the current one and, for 24 hours after a rotation, the previous one). The key
is the whole secret string as UTF-8, `whsec_` prefix included.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence

SIGNATURE_HEADER = "Aijobs-Signature"
DELIVERY_HEADER = "Aijobs-Delivery-Id"
EVENT_HEADER = "Aijobs-Event"
SECRET_PREFIX = "whsec_"  # noqa: S105 - the prefix every secret starts with
SECRET_BYTES = 32
SCHEME = "v1"


def new_secret() -> str:
    """A new signing secret: `whsec_` and 32 random bytes, URL-safe base64."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(signing_secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """The `Aijobs-Signature` value: the timestamp, then one signature per secret."""
    if not signing_secrets:
        raise ValueError("no signing secret")
    signed = ",".join(f"{SCHEME}={signature(secret, timestamp, body)}" for secret in signing_secrets)
    return f"t={timestamp},{signed}"
