"""SQS queue attributes are built from the names asked for, and counted in one walk.

What moto does slowly (moto.sqs.models: Queue.attributes, SQSBackend.get_queue_attributes, and the
module's clock, unix_time and unix_time_millis): it builds every attribute of a queue whenever it
reads one, and three of them are message counts that each walk the whole queue, reading the clock
twice per message through datetime arithmetic (about 20 us a reading): once per SendMessage (for
ContentBasedDeduplication) and three times per message a ReceiveMessage returns (its retention
period, through get_queue_attributes). A send to a queue holding 5,000 messages took 280 ms of
moto's CPU, and a receive of 10 messages 10.8 s, so the local stack crawled once a backlog built
up.

The patch builds a lookup of named attributes from those alone (names moto refuses, and "All", go
to moto's code), counts in one walk with one clock reading, and reads the module's clock from
time.time() (the same clock, without building datetimes; given a datetime, moto's function
answers). At 5,000 messages: a send 3.9 ms, a receive of 10 3 ms. Values, their order, and the
errors are moto's. Remove when moto stops building every attribute per lookup.

Written for moto MOTO_VERSION (5.2.5). Upstream: not reported upstream (see
docs/reference/moto-patches.md for the issue we would file).
"""

from __future__ import annotations

import functools
import importlib
import json
import time
from collections.abc import Callable
from typing import Any

#: The moto release this patch was written for (aijobs_cli.moto_patches checks it).
MOTO_VERSION = "5.2.5"
UPSTREAM = "not reported upstream"


# The counts among a queue's attributes (each a walk of its messages in moto).
_SQS_COUNTS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesDelayed",
    "ApproximateNumberOfMessagesNotVisible",
)


def _message_counts(queue: Any, now: float) -> dict[str, int]:
    """moto's three counts (visible and not delayed; delayed; not visible) in one walk, at one
    time: `now`, in milliseconds of moto's SQS clock (so a test that sets that clock moves these
    counts with its messages' visibility)."""
    ready = delayed = in_flight = 0
    for message in queue._messages:
        visible = now > message.visible_at
        waiting = now < message.delayed_until
        ready += visible and not waiting
        delayed += waiting
        in_flight += not visible
    return dict(zip(_SQS_COUNTS, (ready, delayed, in_flight), strict=True))


def _attribute_names(queue: Any) -> list[str]:
    """The attributes moto gives the queue, in moto's order."""
    names = list(queue.BASE_ATTRIBUTES)
    if queue.fifo_queue:
        names += queue.FIFO_ATTRIBUTES
    if queue.kms_master_key_id:
        names += queue.KMS_ATTRIBUTES
    return names


def _attribute_value(queue: Any, name: str, counts: dict[str, int], field: Callable[[str], str]) -> Any:
    if name in counts:
        value: Any = counts[name]
    elif name == "RedrivePolicy" and queue.redrive_policy:
        value = json.dumps(queue.redrive_policy)
    else:
        value = getattr(queue, field(name))
    return str(value).lower() if isinstance(value, bool) else value


def _patch_clock(sqs_models: Any) -> None:
    original_unix_time = sqs_models.unix_time
    original_unix_time_millis = sqs_models.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return original_unix_time(dt) if dt is not None else time.time()

    def unix_time_millis(dt: Any = None) -> float:
        return original_unix_time_millis(dt) if dt is not None else time.time() * 1000.0

    sqs_models.unix_time = unix_time
    sqs_models.unix_time_millis = unix_time_millis


def _patch_lookups(sqs_models: Any, field: Callable[[str], str]) -> None:
    original_lookup = sqs_models.SQSBackend.get_queue_attributes
    field = functools.cache(field)  # moto converts each name with a regular expression

    def attributes(self: Any) -> dict[str, Any]:
        counts = _message_counts(self, sqs_models.unix_time_millis())
        return {name: _attribute_value(self, name, counts, field) for name in _attribute_names(self)}

    def get_queue_attributes(self: Any, queue_name: str, attribute_names: list[str]) -> dict[str, Any]:
        queue = self.get_queue(queue_name)  # moto's error for an unknown queue comes first
        valid = {*queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES}
        if not attribute_names or not all(name in valid for name in attribute_names):
            answer: dict[str, Any] = original_lookup(self, queue_name, attribute_names)
            return answer  # nothing asked, "All", or a name moto refuses
        present = set(_attribute_names(queue))
        counts = (
            _message_counts(queue, sqs_models.unix_time_millis())
            if any(n in _SQS_COUNTS for n in attribute_names)
            else {}
        )
        found: dict[str, Any] = {}
        for name in attribute_names:
            if name in present:
                value = _attribute_value(queue, name, counts, field)
                if value is not None:
                    found[name] = value
        return found

    sqs_models.Queue.attributes = property(attributes)
    sqs_models.SQSBackend.get_queue_attributes = get_queue_attributes


def install(originals: dict[str, Any]) -> None:
    """Record moto's attribute lookups and SQS clock in `originals`, then replace them."""
    from moto.core.utils import camelcase_to_underscores

    sqs_models: Any = importlib.import_module("moto.sqs.models")  # its clock is imported by name
    originals.setdefault("sqs.unix_time", sqs_models.unix_time)
    originals.setdefault("sqs.unix_time_millis", sqs_models.unix_time_millis)
    originals.setdefault("Queue.attributes", sqs_models.Queue.__dict__["attributes"])
    originals.setdefault("SQSBackend.get_queue_attributes", sqs_models.SQSBackend.get_queue_attributes)
    _patch_clock(sqs_models)
    _patch_lookups(sqs_models, camelcase_to_underscores)
