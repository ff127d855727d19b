"""Signed webhooks: a job's final outcome POSTed to the `callbackUrl` it was submitted with.

- `urls`: what a callback URL may be, and which addresses it may reach (no SSRF).
- `signing`: the `Aijobs-Signature` header (HMAC-SHA256 over `<t>.<raw body>`, Stripe's scheme).
- `secrets`: each tenant's signing secret in the meta table (created and rotated, never logged).
- `messages`: the delivery message (ids only) and `queue_callback`, called after every final transition.
- `rows`: the delivery's state on its job row (claim, settle; the sweeper's lost deliveries).
- `recovery`: the sweeper's re-send of a delivery whose message was lost after the final commit.
- `transport`: one POST, to the checked address.
- `delivery`: the webhook consumer function's logic (claim, sign, POST, retry or give up).
"""
