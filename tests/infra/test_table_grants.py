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
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from dotenv import dotenv_values
from moto import mock_aws

from aijobs import aws, runtime
from aijobs.domain import JobStatus
from aijobs.store.retention import write_retention
from aijobs.store.spend import SpendRecords
from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage_config import parse_stage_config
from aijobs_cli.local.esm import LambdaContext
from aijobs_cli.local.resources import provision
from tests.aws_calls import ACCOUNT, PRESIGNED_POST_KEY, Access, CallLog, recording_calls
from tests.infra.iam import Scope, allowed
from tests.infra.template import Synth, role_statements, target_id
from tests.integration.harness import Clock, Stage, schedule_event
from tests.integration.test_producer_calls import recorded_producer

READ = {"dynamodb:GetItem", "dynamodb:Query"}
# The tenant directory's first lookup in a container also reads the retention (one BatchGetItem).
META_READ = READ | {"dynamodb:BatchGetItem"}
WRITE = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem"}

# function (template handler) -> table -> granted DynamoDB actions.
EXPECTED = {
    # The producer deletes one kind of item: the Idempotency-Key of a job it could not enqueue,
    # so the client's retry may reuse it.
    # In the meta table it writes only tenants' webhook secrets (`WEBHOOK#*`) and, for the
    # operator routes, moves dead-letter entries within their list (`DEADLETTER#*`; checked below).
    "api.handler.handler": {
        "shard": READ | WRITE | {"dynamodb:DeleteItem"},
        "meta": META_READ | {"dynamodb:PutItem", "dynamodb:UpdateItem"},
    },
    # The cron deletes finished jobs and old credit transactions past retention; in the meta table
    # it writes only its run records (a leading-key condition, checked below).
    "cron_dispatcher.handler.handler": {
        "shard": READ | WRITE | {"dynamodb:DeleteItem"},
        "meta": META_READ | {"dynamodb:PutItem", "dynamodb:UpdateItem"},
    },
    # Consumers add to their kind's throttle counters (`FLOW#*` only, checked below).
    "queue_consumer.handler.handler": {"shard": READ | WRITE, "meta": META_READ | {"dynamodb:UpdateItem"}},
    "dlq_consumer.handler.handler": {"shard": READ | WRITE, "meta": META_READ | {"dynamodb:PutItem"}},
    # Reads a job row and updates its webhook delivery state; reads tenants and their secrets.
    "webhook_consumer.handler.handler": {
        "shard": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
        "meta": META_READ,
    },
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
    assert _granted_by_table(capped, producer)["meta"] == META_READ | {
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    }


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

        event = schedule_event("*/10 * * * *")
        # No retention configured yet: the run fails and opens an incident...
        assert handler.handler(event, LambdaContext("cron"))["status"] == "failed"
        write_retention(meta, credit_tx_retention_days=1, ai_task_retention_days=1)
        stage.clock.advance(3 * 86_400)
        # ...which the next run, with credits to expire and a finished job to delete, closes.
        later = {**event, "scheduledTime": "2026-12-02T09:10:00Z", "executionId": "second-run"}
        assert handler.handler(later, LambdaContext("cron"))["status"] == "ok"
        sweep = schedule_event("*/5 * * * *")
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


def test_every_table_call_of_the_webhook_consumer_and_of_secret_rotation_is_granted(
    dev: Synth, stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret rotated through the API, a delivery claimed and settled (a refused address: no
    network), and the sweeper's re-send of a lost delivery."""
    from aijobs.api.schemas import JobRequest
    from aijobs.settings import CronSettings, WebhookSettings
    from aijobs.store.tenants import Principal
    from aijobs.webhooks.urls import UrlPolicy

    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    stage.directory.ensure_user("alice")
    stage.store_for("alice").ledger.grant("alice", 5, stage.clock() + timedelta(days=1))
    with recording_calls() as producer:
        runtime.reset_runtime()
        api = runtime.api_service()
        api.clock = stage.clock
        api.rotate_webhook_secret(Principal("alice"))
        api.rotate_webhook_secret(Principal("alice"))
        api.webhook_policy = UrlPolicy()
        job, _ = api.submit(
            Principal("alice"),
            JobRequest(kind="summary", input="One. Two.", callbackUrl="https://hooks.example.com/in"),
            None,
        )
    assert _assert_allowed(dev, "api.handler.handler", stage, producer) >= {"dynamodb:PutItem"}
    list(stage.drain("summary"))
    with recording_calls() as sweeper:
        runtime.reset_runtime()
        ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
        stage.receive(stage.resources.webhook_queue_url)  # the delivery message is lost
        stage.clock.advance(120)
        from aijobs.scheduled.context import CronRun
        from aijobs.scheduled.sweeper import run_sweeper

        assert run_sweeper(CronRun("*/5 * * * *"), ctx)["webhooksResent"] == 1
    _assert_allowed(dev, "cron_dispatcher.handler.handler", stage, sweeper)
    with recording_calls() as consumer:
        runtime.reset_runtime()
        hooks = runtime.build_webhook_consumer(
            WebhookSettings.from_env(stage.resources.webhook_env()),
            clock=stage.clock,
            resolver=lambda _host, _port: ["10.0.0.9"],
        )
        from aijobs_cli.local.esm import QueueMapping

        mapping = QueueMapping(
            sqs=stage.sqs, queue_url=stage.resources.webhook_queue_url,
            queue_arn=stage.resources.webhook_queue_arn, handler=hooks.handle, function_name="webhooks",
        )  # fmt: skip
        assert mapping.poll_once().received == 1
    assert stage.job(job).callback_state == "failed"  # the address was refused: nothing was POSTed
    used = _assert_allowed(dev, "webhook_consumer.handler.handler", stage, consumer)
    assert used >= {"dynamodb:GetItem", "dynamodb:UpdateItem"}
    runtime.reset_runtime()


# --- the spend brake ------------------------------------------------------------------------------
# Its grants do not depend on SPEND_DAILY_CAP_USD (consumers may write `SPEND#*` counters on every
# stage; without a brake they never do), so a braked stage's calls are checked against `dev`.


@pytest.fixture
def braked_stage() -> Iterator[Stage]:
    """The `dev` stage with a spend brake of 1 USD a day; the local provider's `#cost:` inputs spend."""
    values = {k: v or "" for k, v in dotenv_values(REPO_ROOT / ".env.dev").items()}
    values |= {"PROVIDER": "local", "KIND_PROVIDERS": "", "RETRY_BASE_DELAY_SECONDS": "0"}
    values |= {"SPEND_DAILY_CAP_USD": "1", "SPEND_TIME_ZONE": "UTC"}
    with mock_aws():
        runtime.reset_runtime()
        yield Stage(resources=provision(parse_stage_config("dev", values)), clock=Clock())
    runtime.reset_runtime()


def test_every_table_call_of_a_braked_stage_is_granted(
    dev: Synth, braked_stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counters in the finishing transaction, the tenant's counter read, the day's state read, the
    hold of a job and the alert marker (consumers); a tenant's 402 (producer)."""
    stage = braked_stage
    day = stage.clock().date().isoformat()
    meta = aws.dynamodb().Table(stage.resources.meta_table)
    for user in ("alice", "bob"):
        stage.directory.ensure_user(user)
    SpendRecords(meta).set_tenant_cap("alice", Decimal("0.5"), day)
    inbox = stage.subscribe_inbox()
    first = stage.submit("alice", "summary", "#cost:0.6 One sentence. And a second one.")
    with recording_calls() as consumers:
        runtime.reset_runtime()
        list(stage.drain("summary"))
    assert stage.job(first).status is JobStatus.SUCCEEDED
    # Alice is past her own cap; one of Bob's jobs takes the stage past its cap; the rest wait.
    later = [
        stage.submit(user, "summary", "#cost:0.6 More text. And more.") for user in ("alice", "bob", "bob")
    ]
    with recording_calls() as held:
        runtime.reset_runtime()
        list(stage.drain("summary"))
    assert sorted(stage.job(job).status.value for job in later) == ["queued", "queued", "succeeded"]
    assert stage.job(later[0]).status is JobStatus.QUEUED
    assert len(stage.receive(inbox)) == 1  # the stage's alert
    consumers.accesses.extend(held.accesses)
    used = _assert_allowed(dev, "queue_consumer.handler.handler", stage, consumers)
    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"} <= used
    spend_writes = [
        a
        for a in consumers.accesses
        if (a.action, a.table) == ("dynamodb:UpdateItem", meta.name)
        and str(a.leading_key).startswith("SPEND#")
    ]
    # Two finishing transactions' stage counters, and the alert marker (tried once per job the
    # stage's cap holds: the order of the batch decides whether that is one job or two).
    assert len(spend_writes) >= 3

    with recorded_producer(stage, monkeypatch) as (api, producer):
        service = runtime.api_service()
        assert service.spend is not None
        service.spend.clock = stage.clock
        body = {"kind": "summary", "input": "hello"}
        assert api.call("api-post-jobs.json", body=body, user="alice")[0] == 402
        assert api.call("api-post-jobs.json", body=body, user="bob")[0] == 202  # the stage still accepts
    _assert_allowed(dev, "api.handler.handler", stage, producer)
    runtime.reset_runtime()


# --- the operator routes (aijobs.api.admin) --------------------------------------------------------


def _moto_consumer_mapping(stage: Stage, kind: str) -> str:
    """A (moto) event-source mapping from `kind`'s queue, so pause/resume call Lambda for real."""
    import boto3

    role = boto3.client("iam").create_role(RoleName="consumer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    awslambda = boto3.client("lambda")
    awslambda.create_function(
        FunctionName=f"consumer-{kind}", Runtime="python3.12", Role=role, Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )  # fmt: skip
    return awslambda.create_event_source_mapping(
        EventSourceArn=stage.resources.queue_arns[kind], FunctionName=f"consumer-{kind}", Enabled=True
    )["UUID"]


def _granted_actions(synth: Synth, handler: str) -> set[str]:
    """Every action (patterns like `s3:Get*` included) on the function's role."""
    granted: set[str] = set()
    for function_id in _function_ids(synth, handler):
        for statement in role_statements(synth, function_id):
            actions = statement["Action"]
            granted.update(actions if isinstance(actions, list) else [actions])
    return granted


def test_every_call_of_the_operator_routes_is_granted(
    dev: Synth, stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every admin route through the producer's handler, on jobs of two tenants (a success, a dead
    letter, a permanent failure): its table calls pass the DynamoDB grants (leading keys included),
    its Lambda and SQS calls are actions the producer holds (their resources: the next test)."""
    from tests.integration.test_admin_api import Admin

    mapping = _moto_consumer_mapping(stage, "summary")
    done = stage.submit("alice", "summary", "One sentence. And a second one.")
    doomed = stage.submit("alice", "summary", "#fail:503 keeps failing")
    refused = stage.submit("bob", "summary", "#fail:400 a permanent failure")
    for _ in range(6):
        list(stage.drain("summary"))
    assert stage.dlq_mapping("summary").poll_once().received == 1
    assert stage.job(doomed).status is JobStatus.FAILED_FINAL

    with recorded_producer(stage, monkeypatch) as (_api, log):
        admin_service = runtime.admin_service()
        admin_service.clock = admin_service.operator.clock = stage.clock
        admin_service.operator.sleep = lambda _seconds: None
        admin_service.mappings = {"summary": mapping}
        from api import handler

        admin = Admin(stage, handler.handler)
        log.clear()  # the keys' set-up is not the producer's
        since = (stage.clock() - timedelta(hours=1)).isoformat()
        for method, path, query, body in (
            ("GET", "/admin/overview", None, None),
            ("GET", "/admin/jobs", None, None),
            ("GET", "/admin/jobs", {"kind": "summary", "status": "failed_final", "tenant": "alice",
                                    "errorClass": "transient", "since": since}, None),
            ("GET", f"/admin/jobs/alice/{done.job_id}", None, None),
            ("GET", "/admin/dead-letters", None, None),
            ("POST", f"/admin/jobs/alice/{doomed.job_id}/rerun", None, None),
            ("POST", "/admin/reruns", None, {"kind": "summary"}),
            ("POST", "/admin/reruns", None, {"kind": "summary", "dryRun": False}),
            ("POST", f"/admin/jobs/alice/{doomed.job_id}/fail-final", None, {"reason": "bad input"}),
            ("POST", "/admin/kinds/summary/pause", None, None),
            ("POST", "/admin/kinds/summary/resume", None, None),
            ("GET", "/admin/tenants/alice/credits", None, None),
            ("GET", "/admin/spend", None, None),
        ):  # fmt: skip
            status, _headers, answer = admin.call(method, path, query=query, body=body)
            assert status == 200, (method, path, answer)
    assert stage.job(refused).status is JobStatus.QUEUED  # re-run by the batch
    assert stage.job(doomed).status is JobStatus.FAILED_FINAL
    used = _assert_allowed(dev, "api.handler.handler", stage, log)
    assert {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"} <= used
    # The only meta items the routes update: the dead letter entry the re-run marked.
    meta_writes = {
        str(a.leading_key).split("#", 1)[0]
        for a in log.accesses
        if (a.action, a.table) == ("dynamodb:UpdateItem", stage.resources.meta_table)
    }
    assert meta_writes == {"DEADLETTER"}
    granted = _granted_actions(dev, "api.handler.handler")
    others = {a.action for a in log.accesses if not a.action.startswith("dynamodb:")}
    assert {
        "sqs:GetQueueAttributes", "sqs:SendMessage", "lambda:GetEventSourceMapping",
        "lambda:UpdateEventSourceMapping",
    } <= others  # fmt: skip
    for action in others:
        assert any(fnmatch.fnmatchcase(action, pattern) for pattern in granted), action


def test_the_producer_may_switch_only_the_job_consumers_and_read_only_its_queues(dev: Synth) -> None:
    """The operator routes' Lambda rights are exactly the job queues' consumer mappings (never the
    DLQ or webhook consumers'); its SQS rights reach job queues (and the webhook queue it sends
    to), never a dead-letter queue, and read the attributes of every job queue."""
    from tests.infra.test_concurrency_wiring import _refs

    (producer,) = _function_ids(dev, "api.handler.handler")
    job_queues = {
        logical_id for logical_id in dev.resources("AWS::SQS::Queue")
        if logical_id.startswith("Queue") and "Dlq" not in logical_id
    }  # fmt: skip
    consumers = {
        logical_id
        for logical_id, resource in dev.resources("AWS::Lambda::EventSourceMapping").items()
        if target_id(resource["Properties"]["EventSourceArn"]) in job_queues
    }
    assert len(job_queues) == len(consumers) == len(dev.config.queue_names)
    assert _refs(dev.props(producer)["Environment"]["Variables"]["CONSUMER_MAPPINGS"]) == consumers

    statements = role_statements(dev, producer)

    def actions_of(statement: dict[str, Any]) -> set[str]:
        actions = statement["Action"]
        return set(actions if isinstance(actions, list) else [actions])

    def resources_of(statement: dict[str, Any]) -> list[Any]:
        resources = statement["Resource"]
        return resources if isinstance(resources, list) else [resources]

    (switch,) = [s for s in statements if any(a.startswith("lambda:") for a in actions_of(s))]
    assert actions_of(switch) == {"lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"}
    assert set().union(*(_refs(r) for r in resources_of(switch))) == consumers
    assert all("event-source-mapping:" in json.dumps(r) for r in resources_of(switch))

    queue_rights = [s for s in statements if any(a.startswith("sqs:") for a in actions_of(s))]
    assert set().union(*(actions_of(s) for s in queue_rights)) == {
        "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage",
    }  # fmt: skip
    reachable = {target_id(r) for s in queue_rights for r in resources_of(s)}
    assert not any("Dlq" in queue or "DeadLetters" in queue for queue in reachable)
    assert {queue for queue in reachable - job_queues if not queue.startswith("WebhooksQueue")} == set()
    readable = {
        target_id(r)
        for s in queue_rights
        if "sqs:GetQueueAttributes" in actions_of(s)
        for r in resources_of(s)
    }
    assert job_queues <= readable


# --- a model that is gone: the consumers' and the weekly check's alert markers ---------------------


def _model_marker_writes(log: CallLog, meta: str) -> list[Access]:
    return [
        a
        for a in log.accesses
        if (a.action, a.table) == ("dynamodb:UpdateItem", meta) and str(a.leading_key).startswith("MODEL#")
    ]


def test_every_table_call_of_a_consumer_meeting_an_end_of_life_model_is_granted(
    dev: Synth, stage: Stage
) -> None:
    stage.directory.ensure_user("alice")
    for _ in range(2):
        stage.submit("alice", "summary", "#fail:eol a model past its end of life")
    with recording_calls() as consumers:
        runtime.reset_runtime()
        list(stage.drain("summary"))
    used = _assert_allowed(dev, "queue_consumer.handler.handler", stage, consumers)
    assert "dynamodb:UpdateItem" in used
    # Once per model and container: the kind's model and its fallback (summary falls back locally).
    models = len(stage.resources.config.plan("summary").chain)
    assert len(_model_marker_writes(consumers, stage.resources.meta_table)) == models
    runtime.reset_runtime()


def test_every_table_call_of_the_weekly_model_check_is_granted(dev: Synth, stage: Stage) -> None:
    """The dev stage's plan (Bedrock) checked against a stubbed Bedrock: one model gone, one Legacy."""
    import boto3
    from botocore.stub import Stubber

    from aijobs.providers.lifecycle import bedrock_models
    from aijobs.scheduled.context import CronRun
    from aijobs.scheduled.models import run_model_check
    from aijobs.settings import CronSettings
    from tests.unit.test_model_lifecycle import foundation_model

    bedrock = boto3.client("bedrock", region_name=stage.resources.region)
    with Stubber(bedrock) as stub, recording_calls() as log:
        for model in bedrock_models(dev.config.provider_plans):
            status = "LEGACY" if model == "amazon.nova-micro-v1:0" else "ACTIVE"
            stub.add_response(
                "get_foundation_model", foundation_model(model, status), {"modelIdentifier": model}
            )
        runtime.reset_runtime()
        ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
        # The stage on moto runs the local provider; the check reads the shipped (Bedrock) plan.
        ctx.plans = {plan.kind: plan for plan in dev.config.provider_plans}
        ctx.bedrock = lambda: bedrock
        result = run_model_check(CronRun("0 6 * * 1"), ctx)
    assert result["alerted"] == ["amazon.nova-micro-v1:0"]
    _assert_allowed(dev, "cron_dispatcher.handler.handler", stage, log)
    assert len(_model_marker_writes(log, stage.resources.meta_table)) == 1
    runtime.reset_runtime()


# --- S3: object actions and key prefixes -----------------------------------------------------------
# Narrowed from Bucket.grant_read / grant_put / grant_read_write, which also granted listing the
# whole bucket (every tenant's input keys), s3:DeleteObject* and object legal hold, retention and
# tagging: nothing in the code lists, deletes, tags or locks an object.

OBJECTS: dict[str, dict[str, set[str]]] = {
    # Signs upload forms (PutObject) for inputs, looks an `inputRef` up (HeadObject) and signs
    # download links for results (GetObject).
    "api.handler.handler": {"s3:GetObject": {"inputs/", "results/"}, "s3:PutObject": {"inputs/"}},
    # Reads inputs, workflow parts and children's results; writes results (a streamed one aborts
    # its multipart upload on failure), as do Bedrock's video and Polly's speech tasks for it.
    "queue_consumer.handler.handler": {
        "s3:GetObject": {"inputs/", "results/"},
        "s3:PutObject": {"results/"},
        "s3:AbortMultipartUpload": {"results/"},
    },
    "dlq_consumer.handler.handler": {},
    "cron_dispatcher.handler.handler": {},
    "webhook_consumer.handler.handler": {},
}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _bucket_scope(synth: Synth, bucket: str, region: str = "us-east-1") -> Scope:
    (logical_id,) = synth.resources("AWS::S3::Bucket")
    return Scope(region=region, buckets={logical_id: bucket})


def _object_grants(synth: Synth, function_id: str) -> dict[str, set[str]]:
    """S3 action -> the key prefixes it is granted on; fails on any bucket-level resource."""
    scope = _bucket_scope(synth, "bucket")
    granted: dict[str, set[str]] = {}
    for statement in role_statements(synth, function_id):
        actions = [a for a in _listed(statement["Action"]) if a.startswith("s3:")]
        if not actions:
            continue
        for resource in _listed(statement["Resource"]):
            arn = scope.resolve(resource)
            assert arn.startswith("arn:aws:s3:::bucket/"), (function_id, arn)  # objects, never the bucket
            assert arn.endswith("*"), (function_id, arn)
            for action in actions:
                granted.setdefault(action, set()).add(arn.removeprefix("arn:aws:s3:::bucket/")[:-1])
    return granted


@pytest.mark.parametrize("handler", sorted(OBJECTS))
def test_each_function_is_granted_exactly_its_object_actions_and_key_prefixes(
    dev: Synth, handler: str
) -> None:
    for function_id in _function_ids(dev, handler):
        assert _object_grants(dev, function_id) == OBJECTS[handler], function_id


def _assert_resources_allowed(
    synth: Synth, handler: str, stage: Stage, log: CallLog, function_ids: list[str] | None = None
) -> set[str]:
    """Every S3 and Bedrock access in `log` is allowed by the function's policy (its resource ARN
    and the request's condition keys; `function_ids`: one kind's consumer); returns the actions used."""
    scope = _bucket_scope(synth, stage.resources.bucket, stage.resources.region)
    function_ids = function_ids or _function_ids(synth, handler)
    used = set()
    for access in log.accesses:
        if not access.action.startswith(("s3:", "bedrock:")):
            continue
        used.add(access.action)
        assert allowed(synth, function_ids, access, scope), f"{handler} would be denied {access}"
    return used


def _upload(stage: Stage, key: str, data: bytes, content_type: str = "text/plain") -> None:
    """The client's own upload (not a function's call: a client made outside any recording)."""
    import boto3

    boto3.client("s3").put_object(Bucket=stage.resources.bucket, Key=key, Body=data, ContentType=content_type)


def test_every_object_call_of_the_producer_is_granted(
    dev: Synth, stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upload form, a submit by `inputRef` (HEAD), one naming a missing object (HEAD: 404 here,
    403 on AWS where the producer may not list), and a finished job's download link."""
    # A result too large for its row, so the job has an object to link to (INLINE_RESULT_BYTES).
    long_text = " ".join(f"Sentence {n} says how queue number {n} decoupled its work." for n in range(60))
    done = stage.submit("alice", "summary", long_text, options={"sentences": 60})
    list(stage.drain("summary"))
    with recorded_producer(stage, monkeypatch) as (api, log):
        text = b"Queues decouple work. The consumer runs it."
        upload = {"contentType": "text/plain", "size": len(text), "name": "notes.txt"}
        status, _, form = api.call("api-post-uploads.json", body=upload)
        assert status == 201, form
        _upload(stage, form["inputRef"], text)
        status, _, _ = api.call("api-post-jobs.json", body={"kind": "summary", "inputRef": form["inputRef"]})
        assert status == 202
        missing = {"kind": "summary", "inputRef": "inputs/alice/never-uploaded.txt"}
        assert api.call("api-post-jobs.json", body=missing)[0] == 422
        status, _, job = api.call("api-get-job.json", path=f"/jobs/{done.job_id}")
        assert status == 200
        assert job["resultUrl"], job
    # The form's key is in its fields, not in what botocore signs (tests.aws_calls).
    posted = [a for a in log.accesses if a.resource and a.resource.endswith(PRESIGNED_POST_KEY)]
    assert len(posted) == 1
    log.accesses = [
        replace(a, resource=str(a.resource).replace(PRESIGNED_POST_KEY, form["inputRef"]))
        if a in posted
        else a
        for a in log.accesses
    ]
    assert _assert_resources_allowed(dev, "api.handler.handler", stage, log) == {
        "s3:GetObject",
        "s3:PutObject",
    }
    # And the form's key is one the producer may write: under the caller's own inputs/.
    assert form["inputRef"].startswith("inputs/alice/")


def test_every_object_call_of_the_consumers_is_granted(dev: Synth, stage: Stage) -> None:
    """Results written, an uploaded input read, a missing input, a workflow's parts and children's
    results read back, and an embedding batch streamed into one object (multipart)."""
    stage.directory.ensure_user("alice")
    _upload(stage, "inputs/alice/doc.txt", b"Solar panels convert sunlight. They need little care.")
    by_ref = stage.submit("alice", "summary", None, input_ref="inputs/alice/doc.txt")
    gone = stage.submit("alice", "summary", None, input_ref="inputs/alice/gone.txt")
    parent = stage.submit("alice", "report", "A page of a long report. " * 400, options={"chunkChars": 600})
    lines = "\n".join(json.dumps({"id": f"d{i}", "text": f"document number {i}"}) for i in range(30))
    _upload(stage, "inputs/alice/docs.ndjson", lines.encode(), "application/x-ndjson")
    batch = stage.submit(
        "alice", "embedding-batch", None, input_ref="inputs/alice/docs.ndjson", options={"pageSize": 25}
    )
    with recording_calls() as consumers:
        runtime.reset_runtime()
        for _ in range(6):
            for kind in ("summary", "report", "embedding-batch", "embedding"):
                list(stage.drain(kind))
    assert stage.job(by_ref).status is JobStatus.SUCCEEDED
    assert stage.job(gone).status is JobStatus.FAILED_FINAL
    assert stage.job(parent).status is JobStatus.SUCCEEDED
    assert stage.job(batch).status is JobStatus.SUCCEEDED, stage.job(batch).last_error_message
    used = _assert_resources_allowed(dev, "queue_consumer.handler.handler", stage, consumers)
    assert used == {"s3:GetObject", "s3:PutObject"}
    assert ("s3", "CompleteMultipartUpload") in consumers.calls  # the batch's stream
    runtime.reset_runtime()


# --- Bedrock: each kind's models, a cross-region profile's model only through the profile ---------


def _bedrock_consumer(synth: Synth, stage: Stage, kind: str, client: Any) -> Any:
    """The kind's consumer as the deployed stage builds it (its Bedrock plan), on a stubbed client."""
    from aijobs.provider_plan import plans_setting
    from aijobs.providers.bedrock import BedrockProvider
    from aijobs.settings import ConsumerSettings

    env = {**stage.resources.consumer_env(kind), **plans_setting(synth.config.provider_plans)}
    env |= {"PROVIDER": "bedrock", "PROVIDER_RECHECK_SECONDS": "0"}
    consumer = runtime.build_consumer(ConsumerSettings.from_env(env), clock=stage.clock)
    consumer.provider = BedrockProvider(bucket=stage.resources.bucket, client=client)
    return consumer


def _poll(stage: Stage, kind: str, consumer: Any) -> None:
    from aijobs_cli.local.esm import QueueMapping

    QueueMapping(
        sqs=stage.sqs, queue_url=stage.resources.queue_urls[kind], queue_arn=stage.resources.queue_arns[kind],
        handler=consumer.handle, function_name=f"aijobs-dev-consumer-{kind}",
    ).poll_once()  # fmt: skip


def test_every_model_call_of_the_bedrock_consumers_is_granted(dev: Synth, stage: Stage) -> None:
    """Text through a cross-region profile (the default model and the allowed one), an embedding,
    an image, and a video started and read back, each against its own consumer's policy."""
    import base64

    import boto3
    from botocore.stub import Stubber

    from aijobs.providers.bedrock import client_config
    from tests.infra.test_model_access import _consumer
    from tests.unit.test_bedrock import PNG, converse_answer, invoke_answer

    region = stage.resources.region
    invocation = f"arn:aws:bedrock:{region}:{ACCOUNT}:async-invoke/abcdef012345"
    stage.directory.ensure_user("alice")
    logs: dict[str, CallLog] = {}
    for kind, jobs, answers, polls in (
        (
            "summary",
            [{}, {"model": "us.amazon.nova-pro-v1:0"}],
            [("converse", converse_answer("Queues decouple work."))] * 2,
            1,
        ),
        (
            "embedding",
            [{}],
            [("invoke_model", invoke_answer({"embedding": [0.5] * 1024, "inputTextTokenCount": 4}))],
            1,
        ),
        (
            "image-generate",
            [{}],
            [("invoke_model", invoke_answer({"images": [base64.b64encode(PNG).decode()]}))],
            1,
        ),
        ("video-generate", [{}], [("start_async_invoke", {"invocationArn": invocation})], 2),
    ):
        with recording_calls() as log:
            runtime.reset_runtime()
            client = boto3.client("bedrock-runtime", region_name=region, config=client_config())
            consumer = _bedrock_consumer(dev, stage, kind, client)
            submitted = [
                stage.submit("alice", kind, "A drone flight over a forest at dawn.", **f) for f in jobs
            ]
            with Stubber(client) as stub:
                for operation, answer in answers:
                    stub.add_response(operation, answer)
                if kind == "video-generate":
                    uri = f"s3://{stage.resources.bucket}/results/{submitted[0].job_id}/main/abcdef012345"
                    stub.add_response(
                        "get_async_invoke",
                        {
                            "invocationArn": invocation, "modelArn": "luma", "clientRequestToken": "t",
                            "status": "Completed", "submitTime": stage.clock(),
                            "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": uri}},
                        },
                    )  # fmt: skip
                for _ in range(polls):
                    _poll(stage, kind, consumer)
                stub.assert_no_pending_responses()
        for job in submitted:
            assert stage.job(job).status is JobStatus.SUCCEEDED, (kind, stage.job(job).last_error_message)
        logs[kind] = log
        used = _assert_resources_allowed(
            dev, "queue_consumer.handler.handler", stage, log, [_consumer(dev, kind)]
        )
        assert "bedrock:InvokeModel" in used, kind
    video = {a.action: a.resource for a in logs["video-generate"].accesses if a.action.startswith("bedrock:")}
    assert video["bedrock:GetAsyncInvoke"] == invocation
    started = [a.resource for a in logs["video-generate"].accesses if a.action == "bedrock:InvokeModel"]
    assert f"arn:aws:bedrock:{region}:{ACCOUNT}:async-invoke/*" in started
    runtime.reset_runtime()


def test_a_profiles_foundation_model_may_be_called_only_through_that_profile(dev: Synth) -> None:
    """The base model of a cross-region profile: denied directly, in the stack's region or any
    other, and through another geography's profile; allowed through the kind's own profile. And
    only video kinds may start asynchronous invocations."""
    from tests.aws_calls import model_accesses
    from tests.infra.test_model_access import _consumer

    scope = _bucket_scope(dev, "bucket")
    summary = [_consumer(dev, "summary")]
    through_profile = model_accesses("us.amazon.nova-lite-v1:0", scope.region)
    assert all(allowed(dev, summary, access, scope) for access in through_profile)
    routed = through_profile[1]
    for region in (scope.region, "eu-west-1"):
        direct = Access(
            "bedrock:InvokeModel",
            resource=f"arn:aws:bedrock:{region}::foundation-model/amazon.nova-lite-v1:0",
        )
        assert not allowed(dev, summary, direct, scope), region
    other = f"arn:aws:bedrock:eu-west-1:{ACCOUNT}:inference-profile/eu.amazon.nova-lite-v1:0"
    elsewhere = replace(routed, context=(("bedrock:InferenceProfileArn", other),))
    assert not allowed(dev, summary, elsewhere, scope)
    # The classify model of the producer, likewise.
    (producer,) = _function_ids(dev, "api.handler.handler")
    micro = model_accesses("us.amazon.nova-micro-v1:0", scope.region)
    assert all(allowed(dev, [producer], access, scope) for access in micro)
    assert not allowed(dev, [producer], replace(micro[1], context=()), scope)
    start = Access("bedrock:InvokeModel", resource=f"arn:aws:bedrock:{scope.region}:{ACCOUNT}:async-invoke/*")
    assert allowed(dev, [_consumer(dev, "video-generate")], start, scope)
    assert not allowed(dev, summary, start, scope)
