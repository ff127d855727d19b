"""Query on a secondary index hands moto the table's items unsorted, since moto sorts them again.

What moto does slowly (moto.dynamodb.models.table.Table.query, with IndexName): it sorts every item
of the table (Table.all_items, with Python-level comparisons) before keeping the index partition's
items, which it then sorts by the index key and the table key, a total order: the first sort is
wasted. The patch hands moto the table's items unsorted for that query: the same items, sorted once
by moto into the same order. The walk over the table's items stays (indexes are not maintained
here). Installed before dynamodb_query_table_key, whose wrapper passes every query it does not
answer to this one. Remove with dynamodb_query_table_key.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import threading
from functools import wraps
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"

_local = threading.local()


def _unsorted(table: Any) -> bool:
    """Whether this thread is in an index query of `table` (its items need not be sorted)."""
    return getattr(_local, "unsorted_items", None) is table


def install(originals: dict[str, Any]) -> None:
    """Record moto's Table.query and Table.all_items in `originals`, then skip the first sort."""
    from moto.dynamodb.models import table as table_module

    table_class: Any = table_module.Table  # patched in place: typed loosely on purpose
    original_query = table_class.query
    original_all_items = table_class.all_items
    originals.setdefault("Table.query", original_query)
    originals.setdefault("Table.all_items", original_all_items)

    @wraps(original_all_items)
    def all_items(self: Any) -> list[Any]:
        if not _unsorted(self):
            return original_all_items(self)  # type: ignore[no-any-return]
        items: list[Any] = []
        for hash_set in list(self.items.values()):
            items.extend(list(hash_set.values()) if self.range_key_attr else [hash_set])
        return items

    @wraps(original_query)
    def query(self: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], int, dict[str, Any] | None]:
        # moto's signature: index_name is the eighth argument after self.
        index_name = args[7] if len(args) > 7 else kwargs.get("index_name")
        if not index_name:
            return original_query(self, *args, **kwargs)  # type: ignore[no-any-return]
        # An index query sorts the items it keeps by the index key then the table key, a total
        # order: the table's items need not be sorted first.
        _local.unsorted_items = self
        try:
            return original_query(self, *args, **kwargs)  # type: ignore[no-any-return]
        finally:
            _local.unsorted_items = None

    table_class.all_items = all_items
    table_class.query = query
