"""`sam local invoke` inputs against the synthesized template: the `--env-vars` file resolves every
function's environment to the stage's real names, and the sample events are what AWS would send."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws

from aijobs import runtime
from aijobs.domain import Job, JobStatus
from aijobs.settings import (
    ApiSettings,
    ConsumerSettings,
    CronSettings,
    DlqSettings,
    FunctionSettings,
    WebhookSettings,
)
from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage import load_stage_config
from aijobs_cdk.stage_config import DLQ_SUFFIX, WEBHOOK_QUEUE, queue_resource_name
from aijobs_cli.local import sam_env
from aijobs_cli.local.esm import LambdaContext
from aijobs_cli.local.resources import provision
from aijobs_cli.local.sample_events import schedule_event_names, stage_events
from aijobs_cli.local.stack import LocalStack
from tests.infra.alarm_reader import queue_id
from tests.infra.template import Synth, target_id
from tests.infra.test_functions import SETTINGS_BY_HANDLER
from tests.integration.harness import EVENTS, consumer_event, load_event

pytestmark = pytest.mark.infra

REGION, ACCOUNT = "us-east-1", "123456789012"


def fake_stack(synth: Synth) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """DescribeStacks' stack and the ListStackResources summaries CloudFormation would return for
    the deployed template: physical ids as CloudFormation makes them (a queue's is its URL)."""
    name = synth.stack.stack_name
    summaries = []
    for logical_id, resource in synth.json["Resources"].items():
        resource_type = resource["Type"]
        generated = f"{name}-{logical_id}-1XYZ2ABC3DEF"
        if resource_type == "AWS::SQS::Queue":
            queue_name = resource["Properties"].get("QueueName", generated)
            physical = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{queue_name}"
        elif resource_type == "AWS::SNS::Topic":
            physical = f"arn:aws:sns:{REGION}:{ACCOUNT}:{generated}"
        else:
            physical = generated.lower() if resource_type == "AWS::S3::Bucket" else generated
        summaries.append(
            {"LogicalResourceId": logical_id, "PhysicalResourceId": physical, "ResourceType": resource_type}
        )
    stack = {
        "StackName": name,
        "StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/4b6d2e10-0c3a-11f1-9a2b",
        "Parameters": [{"ParameterKey": "BootstrapVersion", "ParameterValue": "30"}],
    }
    return stack, summaries


def output_ids(synth: Synth, output: str) -> list[str]:
    """The logical ids a stack output refers to (`Ref`, or a `Fn::Join` of them)."""
    value = synth.json["Outputs"][output]["Value"]
    if "Ref" in value:
        return [value["Ref"]]
    return [item["Ref"] for item in value["Fn::Join"][1] if isinstance(item, dict)]


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@pytest.mark.parametrize("fixture", ["dev", "prod", "capped"])
def test_the_env_file_gives_every_function_the_deployed_stacks_real_names(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    stack, summaries = fake_stack(synth)
    physical = {s["LogicalResourceId"]: s["PhysicalResourceId"] for s in summaries}
    env = sam_env.build_env_vars(synth.json, sam_env.from_stack_resources(stack, summaries))

    functions = synth.resources("AWS::Lambda::Function")
    assert set(env) == set(functions)
    stage = synth.config.stage
    meta = physical[output_ids(synth, "MetaTableName")[0]]
    shards = [physical[i] for i in output_ids(synth, "ShardTableNames")]
    (bucket,) = [physical[i] for i in synth.resources("AWS::S3::Bucket")]
    topic = synth.json["Outputs"]["AlertTopicArn"]["Value"]
    topic = physical[topic["Ref"]] if isinstance(topic, dict) else topic

    def deployed_name(kind: str, suffix: str = "") -> str:
        """The name the stack gave a kind's queue (generated in production)."""
        return queue_name(physical[queue_id(synth, queue_resource_name(stage, kind) + suffix)])

    for logical_id, resource in functions.items():
        variables = env[logical_id]
        declared = resource["Properties"]["Environment"]["Variables"]
        assert set(variables) == set(declared), logical_id
        assert all(isinstance(value, str) for value in variables.values()), logical_id
        assert all(variables[name] for name, value in declared.items() if isinstance(value, dict)), logical_id
        model = SETTINGS_BY_HANDLER[resource["Properties"]["Handler"]]
        settings: FunctionSettings = model.from_env(variables)
        assert (settings.meta_table_name, list(settings.shard_table_names)) == (meta, shards), logical_id
        if "ALERT_TOPIC_ARN" in variables:
            assert variables["ALERT_TOPIC_ARN"] == topic, logical_id
        if "BUCKET_NAME" in variables:
            assert variables["BUCKET_NAME"] == bucket, logical_id
        if isinstance(settings, ConsumerSettings):
            assert queue_name(settings.queue_url) == deployed_name(settings.queue_name)
            assert queue_name(settings.dlq_url) == deployed_name(settings.queue_name, DLQ_SUFFIX)
            linked = settings.linked_queue_urls
        elif isinstance(settings, DlqSettings):
            linked = settings.queue_urls
            assert set(linked) == set(synth.config.queue_names), logical_id
            assert settings.dead_letter_kinds == {
                deployed_name(kind, DLQ_SUFFIX): kind for kind in synth.config.queue_names
            }
        elif isinstance(settings, WebhookSettings):
            assert queue_name(settings.webhook_dlq_url) == deployed_name(WEBHOOK_QUEUE, DLQ_SUFFIX)
            linked = {}
        elif isinstance(settings, ApiSettings | CronSettings):
            linked = settings.queue_urls
            assert set(linked) == set(synth.config.queue_names), logical_id
        else:
            raise AssertionError(f"{logical_id}: no settings model {type(settings).__name__} is checked")
        for kind, url in linked.items():
            assert queue_name(url) == deployed_name(kind), (logical_id, kind)
        webhook_queue = getattr(settings, "webhook_queue_url", None)
        if webhook_queue is not None:  # every function that finishes jobs, and the webhook consumer
            assert queue_name(webhook_queue) == deployed_name(WEBHOOK_QUEUE), logical_id


def test_nothing_is_left_unresolved(dev: Synth) -> None:
    stack, summaries = fake_stack(dev)
    env = sam_env.build_env_vars(dev.json, sam_env.from_stack_resources(stack, summaries))
    text = json.dumps(env)
    assert "Ref" not in text
    assert "Fn::" not in text
    assert all(isinstance(v, str) for variables in env.values() for v in variables.values())


# --- the local stack ---------------------------------------------------------------------------------


@pytest.fixture
def local_info() -> Iterator[dict[str, Any]]:
    """The info file `aijobs dev` writes, for the local stage provisioned on (in-process) moto."""
    with mock_aws():
        runtime.reset_runtime()
        config = load_stage_config("local")
        stack = LocalStack(
            config=config,
            resources=provision(config),
            api_url="http://127.0.0.1:8080",
            endpoint_url="http://127.0.0.1:5123",
        )
        yield stack.info()
    runtime.reset_runtime()


def test_the_local_stacks_names_and_endpoint_replace_the_references(
    dev: Synth, local_info: dict[str, Any], tmp_path: Path
) -> None:
    template = tmp_path / "aijobs-dev.template.json"
    template.write_text(json.dumps(dev.json))
    info = tmp_path / "local.json"
    info.write_text(json.dumps(local_info))
    written = sam_env.generate(template, tmp_path / "sam-env.json", info_file=info)
    env = json.loads(written.env_file.read_text())

    assert set(env) == set(dev.resources("AWS::Lambda::Function"))
    for logical_id, variables in env.items():
        assert variables["AWS_ENDPOINT_URL"] == "http://host.docker.internal:5123", logical_id
        assert variables["META_TABLE_NAME"] == local_info["meta_table"], logical_id
        assert variables["SHARD_TABLE_NAMES"] == ",".join(local_info["shard_tables"]), logical_id
        if "QUEUE_NAME" in variables:
            kind = variables["QUEUE_NAME"]
            assert variables["QUEUE_URL"] == local_info["queue_urls"][kind], logical_id
            assert variables["DLQ_URL"] == local_info["dlq_urls"][kind], logical_id
            plans = ConsumerSettings.from_env(variables).plans
            assert {plan.provider for plan in plans.values()} == {"local"}, logical_id
    # SAM passes only declared variables: the template it is told to use declares the endpoint.
    assert written.template == tmp_path / "aijobs-dev.local.template.json"
    local_template = json.loads(written.template.read_text())
    for logical_id in env:
        variables = local_template["Resources"][logical_id]["Properties"]["Environment"]["Variables"]
        assert "AWS_ENDPOINT_URL" in variables, logical_id


def test_a_function_runs_its_sample_event_with_the_env_file_of_the_local_stack(
    dev: Synth, local_info: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `sam local invoke` would do against `aijobs dev`, in process: the summary consumer with
    exactly the env file's variables (moto is in process here, so no endpoint) runs its jobs."""
    template = tmp_path / "aijobs-dev.template.json"
    template.write_text(json.dumps(dev.json))
    info = tmp_path / "local.json"
    info.write_text(json.dumps(local_info))
    env = json.loads(sam_env.generate(template, tmp_path / "env.json", info_file=info).env_file.read_text())
    (consumer,) = [lid for lid, v in env.items() if v.get("QUEUE_NAME") == "summary"]
    for key, value in env[consumer].items():
        if key != "AWS_ENDPOINT_URL":
            monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    written = sam_env.generate(template, tmp_path / "env.json", info_file=info)
    event = json.loads((written.events_dir / "sqs-summary-batch.json").read_text())
    directory = runtime.directory(ConsumerSettings.from_env())
    directory.ensure_user("user-demo")
    store_table = directory.shard_for("user-demo")
    assert store_table is not None
    from aijobs.domain import utcnow
    from aijobs.store.jobs import JobStore

    store = JobStore(store_table, utcnow, buckets=directory.buckets)
    ids = [json.loads(record["body"])["jobId"] for record in event["Records"]]
    now = utcnow()
    for job_id in ids:
        store.create(
            Job(job_id=job_id, user_id="user-demo", kind="summary", status=JobStatus.QUEUED,
                input="One sentence here. And another one.", provider="local", created_at=now,
                updated_at=now)
        )  # fmt: skip
    from queue_consumer import handler

    assert handler.handler(event, LambdaContext(env[consumer]["QUEUE_NAME"])) == {"batchItemFailures": []}
    assert [store.get("user-demo", job_id).status for job_id in ids] == [JobStatus.SUCCEEDED] * len(ids)  # type: ignore[union-attr]


# --- the sample events match what AWS sends to these functions ---------------------------------------


def test_each_consumer_event_comes_from_the_queue_its_function_is_mapped_to(dev: Synth) -> None:
    queue_names = {
        lid: r["Properties"].get("QueueName") for lid, r in dev.resources("AWS::SQS::Queue").items()
    }
    mapped: dict[str, set[str]] = {}
    for mapping in dev.resources("AWS::Lambda::EventSourceMapping").values():
        props = mapping["Properties"]
        mapped.setdefault(target_id(props["FunctionName"]), set()).add(
            queue_names[target_id(props["EventSourceArn"])]
        )
    for logical_id, props in dev.functions_by_handler("queue_consumer.handler.handler").items():
        kind = props["Environment"]["Variables"]["QUEUE_NAME"]
        arns = {r["eventSourceARN"] for r in consumer_event(kind)["Records"]}
        assert {arn.rsplit(":", 1)[-1] for arn in arns} == mapped[logical_id], kind
        assert all(arn.startswith(f"arn:aws:sqs:{REGION}:{ACCOUNT}:") for arn in arns)
    (dlq_consumer,) = dev.functions_by_handler("dlq_consumer.handler.handler")
    dlq_arns = {r["eventSourceARN"] for r in load_event("sqs-dlq-batch.json")["Records"]}
    assert {arn.rsplit(":", 1)[-1] for arn in dlq_arns} <= mapped[dlq_consumer]


SCHEDULER_PLACEHOLDERS = {
    "<aws.scheduler.scheduled-time>": r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ",
    "<aws.scheduler.execution-id>": r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
}


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_each_cron_event_is_the_input_its_schedule_sends(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    (dispatcher,) = synth.functions_by_handler("cron_dispatcher.handler.handler")
    cron_events = [event for event in stage_events(synth.config).values() if "cron" in event]
    schedules = [
        s["Properties"]["Target"]
        for s in synth.resources("AWS::Scheduler::Schedule").values()
        if target_id(s["Properties"]["Target"]["Arn"]) == dispatcher
    ]
    assert len(schedules) == len(synth.config.crons)
    for target in schedules:
        sent = json.loads(target["Input"])
        (event,) = [e for e in cron_events if e["cron"] == sent["cron"]]
        assert set(event) == set(sent), sent["cron"]
        for key, value in sent.items():
            pattern = SCHEDULER_PLACEHOLDERS.get(value, re.escape(value))
            assert re.fullmatch(pattern, event[key]), (sent["cron"], key, event[key])


def test_the_api_events_are_http_api_payload_v2_for_the_default_route(dev: Synth) -> None:
    (integration,) = dev.resources("AWS::ApiGatewayV2::Integration").values()
    assert integration["Properties"]["PayloadFormatVersion"] == "2.0"
    (route,) = dev.resources("AWS::ApiGatewayV2::Route").values()
    for path in sorted(EVENTS.glob("api-*.json")):
        event = json.loads(path.read_text())
        assert (event["version"], event["routeKey"]) == ("2.0", route["Properties"]["RouteKey"]), path.name
        assert event["requestContext"]["http"]["path"] == event["rawPath"], path.name
        query = "&".join(f"{k}={v}" for k, v in event.get("queryStringParameters", {}).items())
        assert event["rawQueryString"] == query, path.name
        assert ("body" in event) == (event["requestContext"]["http"]["method"] == "POST" and "content-type"
                                     in event["headers"]), path.name  # fmt: skip


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_the_printed_sample_events_of_every_function_exist(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    stack, summaries = fake_stack(synth)
    env = sam_env.build_env_vars(synth.json, sam_env.from_stack_resources(stack, summaries))
    written = sam_env.write_events(synth.json, env, REGION, tmp_path / "events")
    for logical_id, resource in sam_env.functions(synth.json).items():
        pattern = sam_env.sample_events(resource, written)
        assert pattern.startswith(f"{written}/"), logical_id
        assert sorted(written.glob(pattern.removeprefix(f"{written}/"))), (logical_id, pattern)


def test_the_written_events_name_the_queues_each_function_reads(prod: Synth, tmp_path: Path) -> None:
    """Production queue names are generated: `sam local invoke` gets events whose records come from
    the queue the function's environment names, or the consumer would acknowledge them unread."""
    stack, summaries = fake_stack(prod)
    env = sam_env.build_env_vars(prod.json, sam_env.from_stack_resources(stack, summaries))
    written = sam_env.write_events(prod.json, env, REGION, tmp_path / "events")
    # The hand-written events, one batch per consumer and one input per schedule.
    kinds = [v["QUEUE_NAME"] for v in env.values() if "QUEUE_NAME" in v]
    assert sorted(kinds) == sorted(prod.config.queue_names)
    expected = {p.name for p in EVENTS.glob("*.json")} | {f"sqs-{kind}-batch.json" for kind in kinds}
    expected |= set(schedule_event_names(cron.text for cron in prod.config.crons).values())
    assert sorted(p.name for p in written.glob("*.json")) == sorted(expected)
    for variables in env.values():
        if "QUEUE_NAME" not in variables:
            continue
        event = json.loads((written / f"sqs-{variables['QUEUE_NAME']}-batch.json").read_text())
        arns = {record["eventSourceARN"] for record in event["Records"]}
        assert arns == {f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name(variables['QUEUE_URL'])}"}
    (dlq_env,) = [v for v in env.values() if "DEAD_LETTER_QUEUES" in v]
    dead = DlqSettings.from_env(dlq_env).dead_letter_kinds
    for record in json.loads((written / "sqs-dlq-batch.json").read_text())["Records"]:
        assert record["eventSourceARN"].rsplit(":", 1)[-1] in dead


def test_the_how_to_invokes_functions_and_events_that_exist(dev: Synth) -> None:
    section = (REPO_ROOT / "docs" / "how-to" / "sam-local-invoke.md").read_text()
    invocations = re.findall(
        r"sam local invoke -t cdk\.out/(\S+) (\S+) \\\n\s+-e \.aijobs/events/(\S+)", section
    )
    assert len(invocations) >= 2
    name = dev.stack.stack_name
    # What `make sam-env` writes for the dev stage: the hand-written events and the generated ones.
    sample_names = {path.name for path in EVENTS.glob("*.json")} | set(stage_events(dev.config))
    for template, logical_id, event in invocations:
        assert template in (f"{name}.template.json", f"{name}.local.template.json"), template
        assert logical_id in sam_env.functions(dev.json), (
            f"docs/how-to/sam-local-invoke.md names {logical_id}: synthesize and update it"
        )
        assert event in sample_names, event
    named = set(re.findall(r"`((?:api|sqs|schedule)-[a-z0-9-]+\.json)`", section))
    assert named <= sample_names
    assert {path.name for path in EVENTS.glob("api-*.json")} <= named, "the how-to lists every API event"
