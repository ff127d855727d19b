"""Adaptive concurrency's wiring: the cron dispatcher knows every consumer's event-source mapping
(EVENT_SOURCE_MAPPINGS) and may read and resize exactly those; QUEUE_MAX_CONCURRENCY=1 gets neither."""

from __future__ import annotations

import json
from typing import Any

from aijobs_cdk.stage_config import EVENT_SOURCE_MAPPINGS
from tests.infra.template import Synth, role_statements
from tests.infra.test_table_grants import stage  # noqa: F401  (the `.env.dev` stage on moto)
from tests.integration.harness import Stage

CRON_HANDLER = "cron_dispatcher.handler.handler"
MAPPING_ACTIONS = {"lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"}


def _refs(value: Any) -> set[str]:
    """Logical ids referenced anywhere in a template value (pseudo parameters left out)."""
    text = json.dumps(value)
    found: set[str] = set()
    for part in text.split('{"Ref": "')[1:]:
        found.add(part.split('"', 1)[0])
    return {ref for ref in found if not ref.startswith("AWS::")}


def _dispatcher(synth: Synth) -> str:
    (logical_id,) = synth.functions_by_handler(CRON_HANDLER)
    return logical_id


def _mapping_statements(synth: Synth, function_id: str) -> list[dict[str, Any]]:
    statements = []
    for statement in role_statements(synth, function_id):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        if MAPPING_ACTIONS & set(actions):
            statements.append(statement)
    return statements


def test_the_cron_knows_each_consumer_mapping_and_may_resize_only_those(dev: Synth) -> None:
    mappings = set(dev.resources("AWS::Lambda::EventSourceMapping"))
    job_consumers = set(dev.functions_by_handler("queue_consumer.handler.handler"))
    sqs_consumers = {
        logical_id
        for logical_id, resource in dev.resources("AWS::Lambda::EventSourceMapping").items()
        if _refs(resource["Properties"]["FunctionName"]) <= job_consumers
    }
    assert len(sqs_consumers) == len(dev.config.queue_names)
    assert sqs_consumers
    assert sqs_consumers <= mappings
    dispatcher = _dispatcher(dev)
    env = dev.props(dispatcher)["Environment"]["Variables"]
    assert _refs(env[EVENT_SOURCE_MAPPINGS]) == sqs_consumers
    for kind in dev.config.queue_names:
        assert f"{kind}=" in json.dumps(env[EVENT_SOURCE_MAPPINGS])
    (statement,) = _mapping_statements(dev, dispatcher)
    assert set(statement["Action"]) == MAPPING_ACTIONS
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    assert "*" not in json.dumps(resources)
    assert set().union(*(_refs(r) for r in resources)) == sqs_consumers
    assert all("event-source-mapping:" in json.dumps(r) for r in resources)


def test_reserved_concurrency_one_gets_no_mapping_to_resize(single_consumer: Synth) -> None:
    dispatcher = _dispatcher(single_consumer)
    assert single_consumer.props(dispatcher)["Environment"]["Variables"][EVENT_SOURCE_MAPPINGS] == ""
    assert _mapping_statements(single_consumer, dispatcher) == []


def test_every_table_call_of_the_concurrency_cron_is_granted(dev: Synth, stage: Stage) -> None:  # noqa: F811
    """Counters written by a throttled consumer, then the controller narrowing a (moto) mapping:
    its Query and its conditional PutItem of the state are allowed by the `FLOW#*` grant."""
    import boto3

    from aijobs import runtime
    from aijobs.scheduled.dispatcher import dispatch
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from aijobs.settings import CronSettings
    from tests.aws_calls import recording_calls
    from tests.infra.test_table_grants import _assert_allowed

    role = boto3.client("iam").create_role(RoleName="consumer", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    awslambda = boto3.client("lambda")
    awslambda.create_function(
        FunctionName="consumer-summary", Runtime="python3.12", Role=role, Handler="h.handler",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
    )  # fmt: skip
    url = stage.sqs.create_queue(QueueName="mapped-only")["QueueUrl"]
    arn = stage.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    uuid = awslambda.create_event_source_mapping(
        EventSourceArn=arn,
        FunctionName="consumer-summary",
        Enabled=False,
        ScalingConfig={"MaximumConcurrency": 8},
    )["UUID"]
    for _ in range(6):
        stage.submit("alice", "summary", "#fail:429 throttled")
    list(stage.drain("summary"))
    env = {**stage.resources.cron_env(), EVENT_SOURCE_MAPPINGS: f"summary={uuid}"}
    with recording_calls() as log:
        ctx = runtime.build_cron_context(CronSettings.from_env(env), clock=stage.clock)
        outcome = dispatch({"cron": "* * * * *"}, ctx, SCHEDULED_HANDLERS)
    assert outcome["result"]["kinds"]["summary"]["action"] == "narrow"
    used = _assert_allowed(dev, CRON_HANDLER, stage, log)
    assert {"dynamodb:Query", "dynamodb:PutItem"} <= used
