"""Fixes to moto, applied wherever this project runs on moto (tests, local stack): one module each.

Most are speed-ups that keep what moto answers, and how its state changes, exactly as moto does it
(for the inputs they accept; anything else goes to moto's own code unchanged); two close races
moto's threaded server opens (dynamodb_request_isolation, sqs_inflight_snapshot); one adds SQS
behaviour moto lacks (sqs_fair_queues). Each module says what moto does wrong or slowly, declares
the moto release it was written for (`MOTO_VERSION`) and its upstream issue or pull request
(`UPSTREAM`, or "not reported upstream": docs/reference/moto-patches.md then holds the issue we
would file), and has one `install(originals)`. `apply()` is the one entry point: it installs them
all, in `PATCHES` order, once per process, and only when the installed moto is the release every
one of them was written for (MOTO_VERSION here, pinned in requirements/dev.in); on any other it
warns and installs none, since each replaces a moto internal that may have changed
(tests/unit/test_moto_patches*.py run every patched path against moto's own). Upgrading moto:
re-read each patch against the new release's code, then move the pin and every MOTO_VERSION
together.
"""

from __future__ import annotations

import warnings
from importlib import metadata
from types import ModuleType
from typing import Any

from aijobs_cli.moto_patches import (
    dynamodb_query_index,
    dynamodb_query_table_key,
    dynamodb_request_isolation,
    dynamodb_transaction_rollback,
    dynamodb_update_expressions,
    server_module_listing,
    sqs_fair_queues,
    sqs_inflight_snapshot,
    sqs_queue_attributes,
)

#: The moto release these patches were written against (requirements/dev.in pins it).
MOTO_VERSION = "5.2.5"

#: Every patch, in the order apply() installs them (dynamodb_query_index before
#: dynamodb_query_table_key, whose Table.query wraps the index one).
PATCHES: tuple[ModuleType, ...] = (
    dynamodb_transaction_rollback,
    dynamodb_query_index,
    dynamodb_query_table_key,
    server_module_listing,
    dynamodb_update_expressions,
    sqs_queue_attributes,
    dynamodb_request_isolation,
    sqs_inflight_snapshot,
    sqs_fair_queues,
)

# moto's own functions, as they were before apply() (tests run both and compare).
ORIGINALS: dict[str, Any] = {}
_applied = False


def moto_matches() -> bool:
    """True when the installed moto is the release every patch was written for; else warns."""
    installed = metadata.version("moto")
    if installed == MOTO_VERSION and all(installed == patch.MOTO_VERSION for patch in PATCHES):
        return True
    warnings.warn(
        f"aijobs: moto {installed} is installed, but the moto patches (aijobs_cli.moto_patches) were "
        f"written for {MOTO_VERSION}: none is applied, so the local stack and the tests run on moto's "
        "own code (slower on big tables and queues, no fair queues, no DynamoDB isolation). Install "
        f"moto=={MOTO_VERSION} (requirements/dev.txt), or re-check the patches and move the pin.",
        RuntimeWarning,
        stacklevel=2,
    )
    return False


def apply() -> None:
    """Install the fixes (idempotent); none when the installed moto is not MOTO_VERSION."""
    global _applied
    if _applied:
        return
    _applied = True  # checked once per process, whether or not they apply
    if not moto_matches():
        return
    for patch in PATCHES:
        patch.install(ORIGINALS)
