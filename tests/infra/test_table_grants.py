"""Each function's DynamoDB grants are exactly what its code uses: the producer and the cron
dispatcher were narrowed from `grant_read_write_data` to their own actions (no Scan anywhere, no
DeleteItem where nothing deletes).

Two directions: the granted actions per function and table are pinned here, and the calls the real
code makes in a broad scenario on moto (recorded from botocore's events, each transaction item as
the action IAM checks) are all allowed by the synthesized policy, including its leading-key
conditions.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from dotenv import dotenv_values
from moto import mock_aws

from aijobs import aws, runtime
from aijobs.domain import JobStatus
from aijobs.scheduled.maintenance import write_retention
from aijobs.stage_config import parse_stage_config
from aijobs_cdk import REPO_ROOT
from aijobs_cli.esm import LambdaContext
from aijobs_cli.resources import provision
from tests.aws_calls import Access, CallLog, recording_calls
from tests.infra.template import Synth, role_statements, target_id
from tests.integration.harness import Clock, Stage, load_event
from tests.integration.test_producer_calls import recorded_producer

READ = {"dynamodb:GetItem", "dynamodb:Query"}
WRITE = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}

# function (template handler) -> table -> granted DynamoDB actions.
EXPECTED = {
    # The producer deletes one kind of item: the Idempotency-Key of a job it could not enqueue,
    # so the client's retry may reuse it.
    "api.handler.handler": {"shard": READ | WRITE | {"dynamodb:DeleteItem"}, "meta": READ},
    # The cron deletes finished jobs and old credit transactions past retention; in the meta table
    # it writes only its run records (a leading-key condition, checked below).
    "cron_dispatcher.handler.handler": {
        "shard": READ | WRITE | {"dynamodb:DeleteItem"},
        "meta": READ | {"dynamodb:PutItem", "dynamodb:UpdateItem"},
    },
    "queue_consumer.handler.handler": {"shard": READ | WRITE, "meta": READ},
    "dlq_consumer.handler.handler": {"shard": READ | WRITE, "meta": READ | {"dynamodb:PutItem"}},
}


def _function_ids(synth: Synth, handler: str) -> list[str]:
    ids = sorted(synth.functions_by_handler(handler))
    assert ids, handler
    return ids


def _table_ids(synth: Synth) -> dict[str, str]:
    """Table logical id -> `meta` or `shard`."""
    return {
        logical_id: "meta" if "Meta" in logical_id else "shard"
        for logical_id in synth.resources("AWS::DynamoDB::Table")
    }


def _resource_table(resource: Any) -> tuple[str, bool]:
    """(table logical id, is an index resource) of a statement's resource."""
    if "Fn::Join" in resource:
        parts = resource["Fn::Join"][1]
        return target_id(parts[0]), any(isinstance(p, str) and "/index/" in p for p in parts)
    return target_id(resource), False


def _dynamodb_grants(synth: Synth, function_id: str) -> list[tuple[set[str], set[tuple[str, bool]], Any]]:
    grants = []
    for statement in role_statements(synth, function_id):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        dynamo = {a for a in actions if a.startswith("dynamodb:")}
        if not dynamo or statement.get("Effect") != "Allow":
            continue
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        grants.append((dynamo, {_resource_table(r) for r in resources}, statement.get("Condition")))
    return grants


def _granted_by_table(synth: Synth, function_id: str) -> dict[str, set[str]]:
    kinds = _table_ids(synth)
    granted: dict[str, set[str]] = {}
    for actions, resources, _condition in _dynamodb_grants(synth, function_id):
        for table, _index in resources:
            granted.setdefault(kinds[table], set()).update(actions)
    return granted


@pytest.mark.parametrize("handler", sorted(EXPECTED))
def test_each_function_is_granted_exactly_its_table_actions(dev: Synth, handler: str) -> None:
    for function_id in _function_ids(dev, handler):
        assert _granted_by_table(dev, function_id) == EXPECTED[handler], function_id


def test_with_jwt_auth_the_producer_may_also_register_a_tenant(capped: Synth) -> None:
    (producer,) = _function_ids(capped, "api.handler.handler")
    assert _granted_by_table(capped, producer)["meta"] == READ | {"dynamodb:PutItem", "dynamodb:UpdateItem"}


def test_no_function_may_scan_a_table(dev: Synth) -> None:
    for logical_id in dev.resources("AWS::Lambda::Function"):
        for statement in role_statements(dev, logical_id):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            assert "dynamodb:Scan" not in actions, logical_id
            assert "dynamodb:*" not in actions, logical_id


def _condition_holds(condition: Any, access: Access) -> bool:
    if not condition:
        return True
    for operator, clauses in condition.items():
        for key, patterns in clauses.items():
            assert (operator, key) == ("ForAllValues:StringLike", "dynamodb:LeadingKeys"), condition
            values = patterns if isinstance(patterns, list) else [patterns]
            if access.leading_key is None or not any(
                fnmatch.fnmatchcase(access.leading_key, p) for p in values
            ):
                return False
    return True


def _assert_allowed(synth: Synth, handler: str, on: Stage, log: CallLog) -> set[str]:
    """Every DynamoDB access in `log` is allowed by the function's policy; returns the actions used."""
    local_tables = {on.resources.meta_table: "Meta"} | {
        name: f"Shard{index}" for index, name in enumerate(on.resources.shard_tables)
    }
    logical = {kind: logical_id for logical_id, kind in _table_ids(synth).items()}
    by_name = {
        name: next(logical_id for logical_id in _table_ids(synth) if construct in logical_id)
        for name, construct in local_tables.items()
    }
    assert logical  # the template has tables
    grants = [grant for fn in _function_ids(synth, handler) for grant in _dynamodb_grants(synth, fn)]
    used = set()
    for access in log.accesses:
        if not access.action.startswith("dynamodb:"):
            continue
        used.add(access.action)
        table = by_name[str(access.table)]
        allowed = any(
            access.action in actions
            and (table, access.index) in resources
            and _condition_holds(condition, access)
            for actions, resources, condition in grants
        )
        assert allowed, f"{handler} would be denied {access}"
    return used


@pytest.fixture
def stage() -> Iterator[Stage]:
    """The stage the `dev` template is synthesized from (`.env.dev`), on moto with the local provider."""
    values = {k: v or "" for k, v in dotenv_values(REPO_ROOT / ".env.dev").items()}
    values |= {"PROVIDER": "local", "KIND_PROVIDERS": "", "RETRY_BASE_DELAY_SECONDS": "0"}
    with mock_aws():
        runtime.reset_runtime()
        yield Stage(resources=provision(parse_stage_config("dev", values)), clock=Clock())
    runtime.reset_runtime()


def test_every_table_call_of_the_producer_is_granted(
    dev: Synth,
    stage: Stage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with recorded_producer(stage, monkeypatch) as (api, log):
        body = {"kind": "summary", "input": {"text": "Queues decouple work. The consumer runs it."}}
        status, _, created = api.call("api-post-jobs.json", body=body, headers={"idempotency-key": "k-1"})
        assert status == 202
        job_id = created["jobId"]
        assert (
            api.call("api-post-jobs.json", body=body, headers={"idempotency-key": "k-1"})[2]["jobId"]
            == job_id
        )
        for sample, path in (
            ("api-get-job.json", f"/jobs/{job_id}"),
            ("api-list-jobs.json", "/jobs"),
            ("api-get-credits.json", "/credits"),
        ):
            assert api.call(sample, path=path)[0] == 200, sample
        assert api.call("api-list-jobs.json", path="/jobs", query={"status": "queued"})[0] == 200
        assert api.call("api-post-job-cancel.json", path=f"/jobs/{job_id}/cancel")[0] == 200
        report = {
            "kind": "report",
            "input": "A page of a long report. " * 400,
            "options": {"chunkChars": 600},
        }
        status, _, parent = api.call("api-post-jobs.json", body=report)
        assert status == 202, parent
        children = api.call("api-get-job-children.json", path=f"/jobs/{parent['jobId']}/children")
        assert children[0] == 200
    used = _assert_allowed(dev, "api.handler.handler", stage, log)
    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem"} <= used


def test_every_table_call_of_the_cron_dispatcher_is_granted(
    dev: Synth,
    stage: Stage,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in stage.resources.cron_env().items():
        monkeypatch.setenv(key, value)
    meta = aws.dynamodb().Table(stage.resources.meta_table)
    stage.directory.ensure_user("alice")
    ledger = stage.store_for("alice").ledger
    ledger.grant("alice", 5, stage.clock() + timedelta(minutes=1))
    old = stage.submit("alice", "summary", "One sentence. And a second one.")
    list(stage.drain("summary"))
    stale = stage.submit("alice", "embedding", "never delivered")
    stage.receive(stage.resources.queue_urls["embedding"])  # its message is lost in flight
    with recording_calls() as log:
        runtime.reset_runtime()
        runtime.cron_context().clock = stage.clock
        from cron_dispatcher import handler

        event = load_event("schedule-cron.json")
        # No retention configured yet: the run fails and opens an incident...
        assert handler.handler(event, LambdaContext("cron"))["status"] == "failed"
        write_retention(meta, credit_tx_retention_days=1, ai_task_retention_days=1)
        stage.clock.advance(3 * 86_400)
        # ...which the next run, with credits to expire and a finished job to delete, closes.
        later = {**event, "scheduledTime": "2026-12-02T09:10:00Z", "executionId": "second-run"}
        assert handler.handler(later, LambdaContext("cron"))["status"] == "ok"
        sweep = load_event("schedule-cron-sweeper.json")
        assert handler.handler(sweep, LambdaContext("cron"))["status"] == "ok"
    used = _assert_allowed(dev, "cron_dispatcher.handler.handler", stage, log)
    assert {"dynamodb:DeleteItem", "dynamodb:Query", "dynamodb:UpdateItem"} <= used
    assert stage.store_for("alice").get("alice", old.job_id) is None
    assert ledger.account("alice").balance == 0
    assert stage.job(stale).last_error_class is not None or stage.job(stale).status.value == "queued"
    runtime.reset_runtime()


def test_every_table_call_of_the_consumers_and_the_dlq_consumer_is_granted(dev: Synth, stage: Stage) -> None:
    """Plain jobs, a retry, a permanent failure, a dead letter, and a workflow from split to merge."""
    stage.directory.ensure_user("alice")
    # Submitted as the producer does (its calls are not the consumers').
    done = stage.submit("alice", "summary", "One sentence. And a second one.")
    retried = stage.submit("alice", "embedding", "#fail:429 some text to embed")
    refused = stage.submit("alice", "summary", "#fail:400 a permanent failure")
    doomed = stage.submit("alice", "summary", "#fail:503 keeps failing")
    parent = stage.submit("alice", "report", "Part one. " * 80, options={"chunkChars": 500})
    with recording_calls() as consumers:
        runtime.reset_runtime()
        for _ in range(6):
            for kind in ("summary", "embedding", "report"):
                list(stage.drain(kind))
    assert stage.job(done).status is JobStatus.SUCCEEDED
    assert stage.job(retried).status is JobStatus.FAILED_RETRYABLE  # throttled: a delayed retry
    assert stage.job(refused).status is JobStatus.FAILED_FINAL
    assert stage.job(parent).status is JobStatus.SUCCEEDED
    used = _assert_allowed(dev, "queue_consumer.handler.handler", stage, consumers)
    assert {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem"} <= used

    with recording_calls() as dlq:
        runtime.reset_runtime()
        assert stage.dlq_mapping("summary").poll_once().received == 1  # built inside: recorded
    assert stage.job(doomed).status is JobStatus.FAILED_FINAL
    assert _assert_allowed(dev, "dlq_consumer.handler.handler", stage, dlq) >= {"dynamodb:PutItem"}
    runtime.reset_runtime()
