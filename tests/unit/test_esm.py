"""How the event-source emulation reads a partial batch response (pure: no queue involved)."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs_cli.local.esm import InvalidBatchResponse, reported_failures

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


@pytest.mark.parametrize(
    "response",
    ["ok", "", 0, False, [], [{"itemIdentifier": "m-1"}], {"m-1"}],
    ids=repr,
)
def test_a_response_that_is_not_a_json_object_fails_the_whole_batch(response: Any) -> None:
    with pytest.raises(InvalidBatchResponse):
        reported_failures(response, BATCH)


@pytest.mark.parametrize("failures", ["", "m-1", {}, {"itemIdentifier": "m-1"}, 0, False], ids=repr)
def test_batch_item_failures_that_are_not_a_list_fail_the_whole_batch(failures: Any) -> None:
    with pytest.raises(InvalidBatchResponse):
        reported_failures({"batchItemFailures": failures}, BATCH)


def test_the_response_is_read_as_json_as_lambda_receives_it() -> None:
    # A tuple serializes as a JSON list: Lambda reads it like one.
    assert reported_failures({"batchItemFailures": ({"itemIdentifier": "m-2"},)}, BATCH) == {"m-2"}
    # An empty object with other keys has a null list: complete success.
    assert reported_failures({"statusCode": 200}, BATCH) == set()
    with pytest.raises(InvalidBatchResponse):
        reported_failures({"batchItemFailures": [{"itemIdentifier": object()}]}, BATCH)
