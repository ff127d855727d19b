"""A fix to moto's DynamoDB fake, applied wherever this project runs on moto (tests, local stack).

moto backs up a table before a TransactWriteItems so it can roll back on failure, but it makes
that deep copy once per *item* of the transaction, not once per table: a 100-item transaction on a
table of N items copies 100 x N items. A workflow split writes its children 100 per transaction,
so on moto a 1,000-child split took a minute. `apply()` keeps moto's behaviour (one backup of each
table taken before anything is written, restored on failure) and takes each table's copy once.
Remove this module once moto copies each table once (it does not as of 5.2.5).
"""

from __future__ import annotations

import copy
import threading
from functools import wraps
from typing import Any

_local = threading.local()
_applied = False


class _CopyModule:
    """Stands in for the `copy` module inside moto's DynamoDB models: inside a transaction of the
    current thread, a repeated deep copy of the same table is the one already made."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        backups: dict[int, Any] | None = getattr(_local, "backups", None)
        if backups is None or memo is not None:
            return copy.deepcopy(value, memo)
        if id(value) not in backups:
            backups[id(value)] = copy.deepcopy(value)
        return backups[id(value)]


def apply() -> None:
    """Install the fix (idempotent)."""
    global _applied
    if _applied:
        return
    from moto.dynamodb import models

    original = models.DynamoDBBackend.transact_write_items

    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        _local.backups = {}
        try:
            original(self, transact_items)
        finally:
            _local.backups = None

    setattr(models, "copy", _CopyModule())  # noqa: B010 (moto imports `copy` as a module global)
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _applied = True
