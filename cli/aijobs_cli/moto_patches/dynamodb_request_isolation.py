"""DynamoDB requests take turns, as DynamoDB applies each one as a single step.

What moto does wrong (moto.dynamodb.responses.DynamoHandler.call_action): not a slow path but a
missing isolation. DynamoDB applies each request, a transaction included, as one step no other
request sees half-done; moto has no locks, and its server answers requests on threads: an
UpdateItem changes the stored item one action at a time (a GetItem served meanwhile returned a job
`succeeded` without its `finishedAt`), a query can iterate a partition another thread is changing
("dictionary changed size during iteration"), and a transaction that fails puts back the items it
named as they were when it started (see dynamodb_transaction_rollback), erasing another request's
write made meanwhile.

The patch takes one lock around each DynamoDB request, in the moto server and in-process (tests
with threads) alike; requests are still read and answered in parallel, only the actions take
turns, which costs nothing the interpreter lock did not already serialize. Remove when moto
serializes its DynamoDB backend.

Written for moto MOTO_VERSION (5.2.5). Upstream: getmoto/moto#2879 (the pull request that added
TransactWriteItems lists "an ongoing operation is in the process of updating the same item" among
the error scenarios it does not emulate); the isolation itself is not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import threading
from functools import wraps
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "https://github.com/getmoto/moto/pull/2879"

#: Held for the whole of each DynamoDB request moto answers (in a server or in-process).
dynamodb_lock = threading.RLock()


def install(originals: dict[str, Any]) -> None:
    """Record moto's DynamoHandler.call_action in `originals`, then wrap it in the lock."""
    from moto.dynamodb.responses import DynamoHandler

    handler_class: Any = DynamoHandler  # patched in place: typed loosely on purpose
    original = handler_class.call_action
    originals.setdefault("DynamoHandler.call_action", original)

    @wraps(original)
    def call_action(self: Any) -> Any:
        with dynamodb_lock:
            return original(self)

    handler_class.call_action = call_action
