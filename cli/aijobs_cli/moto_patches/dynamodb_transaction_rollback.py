"""TransactWriteItems rolls back from copies of the items it names, not of whole tables.

What moto does (moto.dynamodb.models.DynamoDBBackend.transact_write_items): it deep-copies every
table a transaction names (as many times as the transaction has items on it) before it writes
anything, and puts the copies back if the transaction fails. A write costs a copy of the whole
table, so the submit path slowed down as the tables grew, and a rollback also undid whatever
another request wrote to those tables meanwhile.

The patch copies, before anything is written, only the items the transaction's writes name (and
whether their partitions existed); moto then runs with its table copies turned into no-ops, and on
any failure the patch puts each of those items back as it was (absent ones removed, partitions
that only the transaction created dropped). A transaction that fails still leaves every item as it
was. Falls back to moto's table copies, one per table, when a table has a stream (its records are
part of what moto's copy restores) or an item is not one moto would write by key (unknown table,
missing key, more than 100 items...). Remove when moto stops copying whole tables for a
transaction.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import copy
import threading
from collections import defaultdict
from functools import wraps
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"

_local = threading.local()
_table_class: Any = type(None)  # moto's Table, once install() has imported it

# (table, hash key, range key or None, the item as it was or None, whether its partition existed)
_Saved = tuple[Any, Any, Any, Any, bool]


class _CopyModule:
    """Stands in for the `copy` module inside moto's DynamoDB models. Inside a transaction whose
    items the patch has saved, a table's deep copy is the table itself (moto's rollback then puts
    each table back in its own place: nothing); inside any other transaction, each table is copied
    once, however many of the transaction's items name it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        mode = getattr(_local, "transaction", None)
        if mode is None or memo is not None or not isinstance(value, _table_class):
            return copy.deepcopy(value, memo)
        if mode == "journal":
            return value
        backups: dict[int, Any] = _local.backups
        if id(value) not in backups:
            backups[id(value)] = copy.deepcopy(value)
        return backups[id(value)]


def _saved_items(backend: Any, transact_items: list[dict[str, Any]]) -> list[_Saved] | None:
    """A copy of every item the transaction may write, taken before it writes anything; None when
    the transaction is one to leave to moto's table copies."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    if not isinstance(transact_items, list) or len(transact_items) > 100:
        return None
    saved: list[_Saved] = []
    try:
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                return None
            ((op_type, op),) = entry.items()
            if op_type == "ConditionCheck":
                continue
            if op_type not in ("Put", "Update", "Delete") or op.get("TableName") not in backend.tables:
                return None
            table = backend.tables[op["TableName"]]
            if table.stream_shard is not None or not isinstance(table.items, defaultdict):
                return None
            key = op["Item"] if op_type == "Put" else op["Key"]
            names = [table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
            if not all(isinstance(key.get(name), dict) and len(key[name]) == 1 for name in names):
                return None
            hash_key = DynamoType(key[table.hash_key_attr])
            range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
            if range_key is None:
                saved.append((table, hash_key, None, copy.deepcopy(table.items.get(hash_key)), True))
            else:
                partition = table.items.get(hash_key)
                item = None if partition is None else partition.get(range_key)
                saved.append((table, hash_key, range_key, copy.deepcopy(item), partition is not None))
    except (TypeError, AttributeError, KeyError, IndexError, ValueError):
        return None
    return saved


def _restore(saved: list[_Saved]) -> None:
    for table, hash_key, range_key, item, partition_existed in reversed(saved):
        if range_key is None:
            if item is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = item
            continue
        partition = table.items.get(hash_key)
        if item is not None:
            table.items[hash_key][range_key] = item
        elif partition is not None:
            partition.pop(range_key, None)
            if not partition and not partition_existed:
                table.items.pop(hash_key, None)


def install(originals: dict[str, Any]) -> None:
    """Record moto's transact_write_items in `originals`, then replace it."""
    global _table_class
    from moto.dynamodb import models as dynamodb_models
    from moto.dynamodb.models import table

    models: Any = dynamodb_models  # patched in place: typed loosely on purpose
    original = models.DynamoDBBackend.transact_write_items
    originals.setdefault("DynamoDBBackend.transact_write_items", original)
    _table_class = table.Table

    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        saved = _saved_items(self, transact_items)
        _local.transaction = "copy" if saved is None else "journal"
        _local.backups = {}
        try:
            original(self, transact_items)
        except BaseException:
            if saved is not None:
                _restore(saved)
            raise
        finally:
            _local.transaction = None
            _local.backups = {}

    setattr(models, "copy", _CopyModule())  # noqa: B010 (moto imports `copy` as a module global)
    models.DynamoDBBackend.transact_write_items = transact_write_items
