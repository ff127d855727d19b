"""Job rows stay lean: every byte of a row is paid on each of its writes (1 WRU per started KB,
twice in a transaction) and again in each index entry, so a first-try success fits in one KB."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from aijobs.store.keys import PK, SK, job_sk, user_pk
from aijobs_cli.sizing.call_profile import WRITE_UNIT_BYTES, attribute_size, item_size
from tests.integration.harness import Stage
from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported

pytestmark = pytest.mark.integration

# A summary job of a typical short input (the cost profile's text), with a price: credits reserved.
TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part. Retries are classified."
# Attributes a finished row never needs again, or whose absence already means their default.
NEVER_ON_A_FINISHED_ROW = {"claim_id", "lease_expires_at", "dead_lettered", "provider_checks", "options_json"}


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return stage_values | {"QUEUE_NAMES": "summary", "KIND_PRICES": "summary:1", "MAX_RETRIES": "3"}


def _stored(stage: Stage, user: str, job_id: str) -> dict[str, Any]:
    """The row in DynamoDB JSON, as DynamoDB sizes it."""
    item: dict[str, Any] = boto3.client("dynamodb").get_item(
        TableName=stage.resources.shard_tables[0],
        Key={PK: {"S": user_pk(user)}, SK: {"S": job_sk(job_id)}},
        ConsistentRead=True,
    )["Item"]
    return item


def test_a_first_try_success_row_is_under_one_kilobyte(api: Api) -> None:
    job_id = api.submit(input=TEXT)["jobId"]
    list(api.stage.drain("summary"))

    row = _stored(api.stage, "alice", job_id)
    assert row["status"] == {"S": "succeeded"}
    assert item_size(row) < WRITE_UNIT_BYTES, sorted(
        ((len(name) + attribute_size(value), name) for name, value in row.items()), reverse=True
    )
    assert not NEVER_ON_A_FINISHED_ROW & set(row)
    assert not [name for name, value in row.items() if "NULL" in value]  # nothing absent is written
    (entry,) = row["attempt_log"]["L"]
    assert set(entry["M"]) == {"n", "o", "t", "d"}  # attempt, outcome, end, duration: no start, no names


def test_attempt_log_entries_stay_compact_on_a_dead_lettered_row(api: Api) -> None:
    job_id = api.submit(input="#fail:503 " + TEXT)["jobId"]
    for _ in range(6):
        list(api.stage.drain("summary"))
    assert api.stage.dlq_mapping("summary").poll_once().received == 1

    row = _stored(api.stage, "alice", job_id)
    assert row["status"] == {"S": "failed_final"}
    entries = row["attempt_log"]["L"]
    assert len(entries) == 5  # four failed attempts, then the dead letter's finalization
    # Each entry: its short names, an epoch-millisecond end, the error class and a clipped message.
    assert attribute_size(row["attempt_log"]) < 100 * len(entries)
    assert row["dead_lettered"] == {"BOOL": True}
    assert not (NEVER_ON_A_FINISHED_ROW - {"dead_lettered"}) & set(row)
