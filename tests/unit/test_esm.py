"""How the event-source emulation reads a partial batch response (pure: no queue involved)."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs_cli.esm import InvalidBatchResponse, reported_failures

BATCH = ["m-1", "m-2", "m-3"]


@pytest.mark.parametrize(
    "response", [None, {}, {"batchItemFailures": []}, {"batchItemFailures": None}], ids=repr
)
def test_no_reported_failures_is_complete_success(response: Any) -> None:
    assert reported_failures(response, BATCH) == set()


def test_reported_failures_are_the_listed_messages() -> None:
    response = {"batchItemFailures": [{"itemIdentifier": "m-2"}, {"itemIdentifier": "m-3"}]}
    assert reported_failures(response, BATCH) == {"m-2", "m-3"}


@pytest.mark.parametrize(
    "item",
    [
        {"itemIdentifier": "not-in-this-batch"},
        {"itemIdentifier": ""},
        {"itemIdentifier": None},
        {"itemIdentifer": "m-1"},  # a bad key name
        "m-1",
    ],
    ids=repr,
)
def test_an_item_lambda_would_reject_fails_the_whole_batch(item: Any) -> None:
    with pytest.raises(InvalidBatchResponse):
        reported_failures({"batchItemFailures": [{"itemIdentifier": "m-1"}, item]}, BATCH)
