"""DynamoDB tables and the S3 bucket: keys, indexes, recovery, protection, encryption, lifecycle."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aijobs.store.keys import META_INDEXES, PK, SHARD_INDEXES, SK, TTL_ATTRIBUTE
from tests.infra.template import Synth

pytestmark = pytest.mark.infra


def _index_keys(props: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    return {
        index["IndexName"]: tuple(key["AttributeName"] for key in index["KeySchema"])
        for index in props.get("GlobalSecondaryIndexes", [])
    }


def test_tables_are_on_demand_with_pitr_and_the_documented_keys(dev: Synth) -> None:
    tables = dev.resources("AWS::DynamoDB::Table")
    assert len(tables) == 1 + dev.config.shard_count
    index_sets = []
    for props in (t["Properties"] for t in tables.values()):
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
        assert props["SSESpecification"]["SSEEnabled"] is True
        assert props["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
        assert [k["AttributeName"] for k in props["KeySchema"]] == [PK, SK]
        index_sets.append(_index_keys(props))
    assert META_INDEXES in index_sets
    assert SHARD_INDEXES in index_sets


def test_shard_count_creates_that_many_shard_tables_listed_for_the_functions(capped: Synth) -> None:
    tables = capped.resources("AWS::DynamoDB::Table")
    assert len(tables) == 3
    (api,) = capped.functions_by_handler("api.handler.handler").values()
    joined = api["Environment"]["Variables"]["SHARD_TABLE_NAMES"]["Fn::Join"]
    assert joined[0] == ","
    assert len(joined[1]) == 2


def test_deletion_protection_and_retention_only_in_prod(dev: Synth, prod: Synth) -> None:
    for synth, protected in ((dev, False), (prod, True)):
        for logical_id, table in synth.resources("AWS::DynamoDB::Table").items():
            assert table["Properties"]["DeletionProtectionEnabled"] is protected, logical_id
            assert table["DeletionPolicy"] == ("Retain" if protected else "Delete")


def test_bucket_blocks_public_access_encrypts_and_expires_results(dev: Synth) -> None:
    ((bucket_id, bucket),) = dev.resources("AWS::S3::Bucket").items()
    props = bucket["Properties"]
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    (encryption,) = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert encryption["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    rules = {rule["Id"]: rule for rule in props["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-results"]["Prefix"] == "results/"
    assert rules["expire-results"]["ExpirationInDays"] == dev.config.result_retention_days
    assert rules["abort-incomplete-uploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    assert bucket["DeletionPolicy"] == "Retain"
    (policy,) = dev.resources("AWS::S3::BucketPolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in statements
    )
    assert policy["Properties"]["Bucket"] == {"Ref": bucket_id}


def test_prod_retains_every_queue_table_and_the_bucket_under_generated_names(prod: Synth) -> None:
    """Deleting or replacing a production resource keeps its data; a generated name lets the
    replacement (or the stack deployed again) be created while the retained one still exists."""
    stateful = {
        **prod.resources("AWS::SQS::Queue"),
        **prod.resources("AWS::DynamoDB::Table"),
        **prod.resources("AWS::S3::Bucket"),
    }
    queues = prod.resources("AWS::SQS::Queue")
    # Every kind's queue and DLQ, the DLQ parking queue, the schedules' dead-letter queue, and the
    # webhook deliveries' queue and DLQ.
    assert len(queues) == 2 * len(prod.config.queue_names) + 4
    for logical_id, resource in stateful.items():
        assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == ("Retain", "Retain"), (
            logical_id
        )
        props = resource.get("Properties", {})
        assert not {"QueueName", "TableName", "BucketName"} & set(props), logical_id


def test_other_stages_name_their_queues_and_delete_them_with_the_stack(dev: Synth) -> None:
    for logical_id, queue in dev.resources("AWS::SQS::Queue").items():
        assert (queue["DeletionPolicy"], queue["UpdateReplacePolicy"]) == ("Delete", "Delete"), logical_id
        assert queue["Properties"]["QueueName"].startswith("aijobs-dev-"), logical_id
    # Results are user data: the bucket is kept on every stage.
    ((_, bucket),) = dev.resources("AWS::S3::Bucket").items()
    assert bucket["DeletionPolicy"] == "Retain"


def test_the_dlq_consumer_knows_each_dlq_by_reference_not_by_name(prod: Synth) -> None:
    (dlq_consumer,) = prod.functions_by_handler("dlq_consumer.handler.handler").values()
    mapping = json.dumps(dlq_consumer["Environment"]["Variables"]["DEAD_LETTER_QUEUES"])
    for kind in prod.config.queue_names:
        assert f"{kind}=" in mapping
    dlq_ids = {logical_id for logical_id in prod.resources("AWS::SQS::Queue") if "Dlq" in logical_id}
    referenced = {ref for ref in dlq_ids if ref in mapping}
    assert len(referenced) == len(prod.config.queue_names)
