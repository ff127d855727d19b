"""The `--env-vars` file for `sam local invoke`: every function's environment with real names.

A synthesized template's environment values are CloudFormation references (`{"Ref": ...}`,
`Fn::GetAtt`, `Fn::Join`, `Fn::Sub`); SAM cannot resolve them and passes an empty string, so a
function would start without its tables and queues. This module resolves them against either

- a deployed stack: the physical ids of its resources (`ListStackResources`), or
- the local stack: the info file `aijobs dev --info-file FILE` writes (moto's endpoint and the
  names it provisioned), mapped onto the template through the stack outputs `aijobs` reads anyway.

SAM only overrides variables a function declares in the template. The local stack also needs
`AWS_ENDPOINT_URL`, which no deployed function declares, so in that mode a copy of the template
that declares it is written next to the original (asset paths stay relative to it), and every
kind runs on the `local` provider, as under `aijobs dev` (moto answers no Bedrock or Polly call).

    python -m aijobs_cli.local.sam_env --template cdk.out/aijobs-dev.template.json --stack aijobs-dev \
        --out .aijobs/sam-env.json
    python -m aijobs_cli.local.sam_env --template cdk.out/aijobs-dev.template.json \
        --info-file .aijobs/local.json --out .aijobs/sam-env.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aijobs_cdk.stage_config import DLQ_SUFFIX, binding_name, queue_resource_name

FUNCTION_TYPE = "AWS::Lambda::Function"
# Inside a SAM container, the host's loopback is not 127.0.0.1 (Docker Desktop's name for the host).
CONTAINER_HOST = "host.docker.internal"
ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL"
LOCAL_PROVIDER = "local"
# moto's account; the local stack's resources all live in it.
MOTO_ACCOUNT = "123456789012"

# `resolve(name, attribute)`: `name` is a logical id, a template parameter or a pseudo parameter
# (`AWS::Region`); `attribute` is the `Fn::GetAtt` attribute, or None for `Ref`.
Resolve = Callable[[str, str | None], str]


class SamEnvError(Exception):
    """A value cannot be resolved, or the source cannot be read; the message says which and why."""


# --- resolving a template's environment -------------------------------------------------------------


def functions(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every Lambda function of the template: logical id -> its resource."""
    return {
        logical_id: resource
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == FUNCTION_TYPE
    }


def build_env_vars(template: Mapping[str, Any], resolve: Resolve) -> dict[str, dict[str, str]]:
    """`{LogicalId: {VAR: value}}` for every function, each reference resolved to a plain string."""
    env: dict[str, dict[str, str]] = {}
    for logical_id, resource in functions(template).items():
        variables = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        resolved = {}
        for name, value in variables.items():
            try:
                resolved[name] = _string(value, resolve)
            except SamEnvError as error:
                raise SamEnvError(f"{logical_id} {name}: {error}") from None
        env[logical_id] = resolved
    return env


def _string(value: Any, resolve: Resolve) -> str:
    resolved = _value(value, resolve)
    if isinstance(resolved, list):
        raise SamEnvError(f"resolves to a list, not a string: {resolved}")
    return resolved


def _value(value: Any, resolve: Resolve) -> str | list[str]:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list):
        return [_string(item, resolve) for item in value]
    if not isinstance(value, dict) or len(value) != 1:
        raise SamEnvError(f"not a value or an intrinsic function: {json.dumps(value)}")
    ((function, argument),) = value.items()
    if function == "Ref":
        return resolve(str(argument), None)
    if function == "Fn::GetAtt":
        logical_id, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
        return resolve(str(logical_id), _string(attribute, resolve))
    if function == "Fn::Join":
        separator, items = argument
        parts = _value(items, resolve)
        return str(separator).join(parts if isinstance(parts, list) else [parts])
    if function == "Fn::Sub":
        return _sub(argument, resolve)
    if function == "Fn::Select":
        index, items = argument
        choices = _value(items, resolve)
        if not isinstance(choices, list):
            raise SamEnvError(f"Fn::Select needs a list: {json.dumps(value)}")
        return choices[int(_string(index, resolve))]
    if function == "Fn::Split":
        separator, text = argument
        return _string(text, resolve).split(separator)
    raise SamEnvError(f"{function} is not supported here: {json.dumps(value)}")


def _sub(argument: Any, resolve: Resolve) -> str:
    text, names = (argument, {}) if isinstance(argument, str) else argument
    local = {name: _string(item, resolve) for name, item in names.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"  # `${!Literal}` is the escape for a literal `${Literal}`
        if name in local:
            return local[name]
        if "." in name:
            logical_id, attribute = name.split(".", 1)
            return resolve(logical_id, attribute)
        return resolve(name, None)

    return re.sub(r"\$\{([^}]+)\}", replace, text)


# --- what the references point at -------------------------------------------------------------------


@dataclass
class PhysicalResources:
    """A resolver: logical id -> (resource type, physical id), plus the stack's account and region.

    `Ref` of every resource type used in a function environment is its physical id (a queue's
    URL, a table's or bucket's name, a topic's ARN); `Fn::GetAtt` is derived from it."""

    region: str
    account: str
    stack_name: str
    resources: dict[str, tuple[str, str]]
    partition: str = "aws"
    parameters: dict[str, str] = field(default_factory=dict)
    source: str = "the stack"

    def __call__(self, name: str, attribute: str | None) -> str:
        if attribute is None:
            if name in self.parameters:
                return self.parameters[name]
            pseudo = self._pseudo(name)
            if pseudo is not None:
                return pseudo
        if name not in self.resources:
            raise SamEnvError(f"{self.source} has no resource {name!r}")
        resource_type, physical_id = self.resources[name]
        if attribute is None:
            return physical_id
        return self._attribute(name, resource_type, physical_id, attribute)

    @property
    def url_suffix(self) -> str:
        return "amazonaws.com.cn" if self.partition == "aws-cn" else "amazonaws.com"

    def _pseudo(self, name: str) -> str | None:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": self.stack_name,
        }.get(name)

    def _arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account}:{resource}"

    def _attribute(self, logical_id: str, resource_type: str, physical_id: str, attribute: str) -> str:
        last = physical_id.rstrip("/").rsplit("/", 1)[-1]
        derived: dict[tuple[str, str], Callable[[], str]] = {
            ("AWS::SQS::Queue", "Arn"): lambda: self._arn("sqs", last),
            ("AWS::SQS::Queue", "QueueName"): lambda: last,
            ("AWS::SQS::Queue", "QueueUrl"): lambda: physical_id,
            ("AWS::DynamoDB::Table", "Arn"): lambda: self._arn("dynamodb", f"table/{physical_id}"),
            ("AWS::SNS::Topic", "TopicArn"): lambda: physical_id,
            ("AWS::SNS::Topic", "TopicName"): lambda: physical_id.rsplit(":", 1)[-1],
            ("AWS::S3::Bucket", "Arn"): lambda: f"arn:{self.partition}:s3:::{physical_id}",
            ("AWS::S3::Bucket", "DomainName"): lambda: f"{physical_id}.s3.{self.url_suffix}",
            ("AWS::S3::Bucket", "RegionalDomainName"): (
                lambda: f"{physical_id}.s3.{self.region}.{self.url_suffix}"
            ),
            ("AWS::Lambda::Function", "Arn"): lambda: self._arn("lambda", f"function:{physical_id}"),
            ("AWS::IAM::Role", "Arn"): lambda: f"arn:{self.partition}:iam::{self.account}:role/{physical_id}",
            ("AWS::ApiGatewayV2::Api", "ApiEndpoint"): (
                lambda: f"https://{physical_id}.execute-api.{self.region}.{self.url_suffix}"
            ),
            ("AWS::Logs::LogGroup", "Arn"): lambda: self._arn("logs", f"log-group:{physical_id}:*"),
        }
        if (resource_type, attribute) not in derived:
            raise SamEnvError(f"cannot derive Fn::GetAtt {logical_id}.{attribute} ({resource_type})")
        return derived[(resource_type, attribute)]()


def from_stack_resources(
    stack: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]]
) -> PhysicalResources:
    """A resolver from `DescribeStacks`' stack and its `ListStackResources` summaries (the same
    fields `DescribeStackResources` returns: LogicalResourceId, PhysicalResourceId, ResourceType)."""
    stack_id = str(stack["StackId"])  # arn:aws:cloudformation:us-east-1:123456789012:stack/name/guid
    arn = stack_id.split(":")
    if len(arn) < 6 or arn[0] != "arn":
        raise SamEnvError(f"unexpected stack id {stack_id!r}")
    return PhysicalResources(
        region=arn[3],
        account=arn[4],
        partition=arn[1],
        stack_name=str(stack["StackName"]),
        resources={
            str(s["LogicalResourceId"]): (str(s["ResourceType"]), str(s["PhysicalResourceId"]))
            for s in summaries
            if s.get("PhysicalResourceId")
        },
        parameters={
            str(p["ParameterKey"]): str(p.get("ParameterValue", "")) for p in stack.get("Parameters", [])
        },
        source=f"the deployed stack {stack['StackName']!r} (deploy the code you synthesized)",
    )


def cloudformation_client(*, profile: str | None, region: str | None) -> Any:
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(profile_name=profile, region_name=region)
    except BotoCoreError as error:
        raise SamEnvError(f"cannot use AWS profile {profile!r}: {error}") from None
    if session.region_name is None:
        raise SamEnvError("no AWS region: pass --region, or set AWS_REGION or a profile region")
    return session.client("cloudformation")


def read_stack(cloudformation: Any, stack_name: str) -> PhysicalResources:
    """The deployed stack's resources (needs credentials that may describe the stack)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        # DescribeStackResources stops at 100 resources; a stage has more. ListStackResources pages.
        summaries = [
            summary
            for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack_name)
            for summary in page["StackResourceSummaries"]
        ]
    except (BotoCoreError, ClientError) as error:
        raise SamEnvError(f"cannot read stack {stack_name!r}: {error}") from None
    return from_stack_resources(dict(stack), [dict(s) for s in summaries])


def from_local_info(
    template: Mapping[str, Any], info: Mapping[str, Any], *, endpoint_host: str = CONTAINER_HOST
) -> PhysicalResources:
    """A resolver onto the local stack: the template's outputs say which logical id is which table,
    queue, bucket or topic; the info file gives the local names. Endpoint URLs (in queue URLs too)
    are rewritten to `endpoint_host`, the host as a SAM container reaches it."""
    try:
        endpoint = str(info["aws_endpoint_url"])
        local_by_output: dict[str, list[str]] = {
            "MetaTableName": [str(info["meta_table"])],
            "ShardTableNames": [str(name) for name in info["shard_tables"]],
            "BucketName": [str(info["bucket"])],
            "AlertTopicArn": [str(info["alert_topic_arn"])],
        }
        for kind, url in dict(info["queue_urls"]).items():
            local_by_output["QueueUrl" + _binding(kind)] = [str(url)]
        for kind, url in dict(info["dlq_urls"]).items():
            local_by_output["DlqUrl" + _binding(kind)] = [str(url)]
        local_by_output["WebhookQueueUrl"] = [str(info["webhook_queue_url"])]
        local_by_output["WebhookDlqUrl"] = [str(info["webhook_dlq_url"])]
    except (KeyError, TypeError, AttributeError) as error:
        raise SamEnvError(f"the info file lacks {error}: restart the local stack with `aijobs dev`") from None

    container_endpoint = container_url(endpoint, endpoint_host)
    template_resources = template.get("Resources", {})
    resources: dict[str, tuple[str, str]] = {}
    for output, spec in template.get("Outputs", {}).items():
        if output not in local_by_output:
            continue
        logical_ids = _referenced_ids(spec.get("Value"))
        names = local_by_output[output]
        if len(logical_ids) != len(names):
            raise SamEnvError(
                f"output {output} names {len(logical_ids)} resources, the local stack has {len(names)}: "
                "synthesize the stage the local stack runs, or restart it with the same configuration"
            )
        for logical_id, name in zip(logical_ids, names, strict=True):
            resource_type = str(template_resources.get(logical_id, {}).get("Type", ""))
            resources[logical_id] = (resource_type, name.replace(endpoint, container_endpoint))
    region = str(info.get("region") or "us-east-1")
    # The local stack emulates the event-source mappings and knows each by its queue's ARN.
    for logical_id, spec in template_resources.items():
        if spec.get("Type") != "AWS::Lambda::EventSourceMapping":
            continue
        source = spec.get("Properties", {}).get("EventSourceArn")
        queue_id = source.get("Fn::GetAtt", [None])[0] if isinstance(source, dict) else None
        if queue_id in resources:
            queue_name = resources[queue_id][1].rstrip("/").rsplit("/", 1)[-1]
            arn = f"arn:aws:sqs:{region}:{MOTO_ACCOUNT}:{queue_name}"
            resources[logical_id] = ("AWS::Lambda::EventSourceMapping", arn)
    return PhysicalResources(
        region=region,
        account=MOTO_ACCOUNT,
        stack_name=f"aijobs-{info.get('stage', 'local')}",
        resources=resources,
        source="the local stack (its info file)",
    )


def _binding(kind: str) -> str:
    """A queue's suffix in the stack's output ids (CloudFormation ids drop the underscores)."""
    return binding_name(kind).replace("_", "")


def _referenced_ids(value: Any) -> list[str]:
    """The logical ids an output refers to, in order: `Ref` or a `Fn::Join` of `Ref`s."""
    if isinstance(value, dict) and "Ref" in value:
        return [str(value["Ref"])]
    if isinstance(value, dict) and "Fn::Join" in value:
        return [logical_id for item in value["Fn::Join"][1] for logical_id in _referenced_ids(item)]
    return []


def container_url(url: str, host: str) -> str:
    """`url` with its host replaced (the port kept): how a container reaches a server on the host."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return parts._replace(netloc=f"{host}{port}").geturl()


def local_overrides(variables: Mapping[str, str], endpoint: str) -> dict[str, str]:
    """What a function needs on the local stack besides its resource names: moto's endpoint, and
    the local provider for every kind (as `aijobs dev` runs them): with every AWS call going to
    moto, a Bedrock or Polly call could not work."""
    overrides = {ENDPOINT_VARIABLE: endpoint}
    # The cron adjusts mappings through the Lambda API, which moto only stands in for: on the local
    # stack it has none to adjust (as `aijobs dev` runs it, see StageResources.cron_env).
    if "EVENT_SOURCE_MAPPINGS" in variables:
        overrides["EVENT_SOURCE_MAPPINGS"] = ""
    if "PROVIDER" in variables:
        overrides["PROVIDER"] = LOCAL_PROVIDER
    if variables.get("KIND_PROVIDERS"):
        overrides.update(_local_plans(variables["KIND_PROVIDERS"]))
    return overrides


def _local_plans(kind_providers: str) -> dict[str, str]:
    """The same kinds planned on the local provider: its models (as the local stage plans them),
    no allow-lists and the local fallbacks the kinds declare."""
    from aijobs.provider_plan import kind_pairs, plans_setting
    from aijobs.workflows.registry import workflow_children
    from aijobs_cdk.provider_plans import parse_provider_plan

    kinds = tuple(kind for kind in kind_pairs("KIND_PROVIDERS", kind_providers) if kind != "classify")
    children = {kind: child for kind, child in workflow_children().items() if kind in kinds}
    plans = parse_provider_plan(stage="local", kinds=kinds, default_provider=LOCAL_PROVIDER, inherit=children)
    return plans_setting(plans)


def declare_endpoint(template: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the template whose every function declares `AWS_ENDPOINT_URL` (empty): SAM only
    passes the variables a function declares, so without this the env file could not set it."""
    copy: dict[str, Any] = json.loads(json.dumps(template))
    for resource in functions(copy).values():
        environment = resource.setdefault("Properties", {}).setdefault("Environment", {})
        environment.setdefault("Variables", {})[ENDPOINT_VARIABLE] = ""
    return copy


# --- the command ------------------------------------------------------------------------------------


@dataclass
class Written:
    env_file: Path
    template: Path  # the template to pass to `sam local invoke -t`
    events: dict[str, str]  # logical id -> its sample events (in events_dir)
    events_dir: Path  # the sample events, their SQS source ARNs naming this stage's real queues


def local_template_path(template_path: Path) -> Path:
    """Next to the synthesized template, so its relative asset paths still resolve."""
    return template_path.with_name(template_path.name.replace(".template.json", "") + ".local.template.json")


def generate(
    template_path: Path,
    out: Path,
    *,
    stack: str | None = None,
    profile: str | None = None,
    region: str | None = None,
    info_file: Path | None = None,
    endpoint_host: str = CONTAINER_HOST,
) -> Written:
    """Write the env-vars file (and, for the local stack, the template that declares the endpoint)."""
    if (stack is None) == (info_file is None):
        raise SamEnvError("pass exactly one of --stack NAME (a deployed stage) or --info-file FILE (local)")
    template = _read_json(template_path, "template", hint="run `make synth` (or `npx cdk synth`) first")
    if not functions(template):
        raise SamEnvError(f"{template_path} has no {FUNCTION_TYPE}: is it a synthesized aijobs stack?")
    sam_template = template_path
    if stack is not None:
        client = cloudformation_client(profile=profile, region=region)
        physical = read_stack(client, stack)
        env = build_env_vars(template, physical)
    else:
        assert info_file is not None
        info = _read_json(
            info_file, "info file", hint=f"start the local stack: aijobs dev --info-file {info_file}"
        )
        physical = from_local_info(template, info, endpoint_host=endpoint_host)
        env = build_env_vars(template, physical)
        endpoint = container_url(str(info["aws_endpoint_url"]), endpoint_host)
        for variables in env.values():
            variables.update(local_overrides(variables, endpoint))
        sam_template = local_template_path(template_path)
        sam_template.write_text(json.dumps(declare_endpoint(template), indent=1) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    events_dir = write_events(template, env, physical.region, out.parent / "events")
    events = {
        logical_id: sample_events(resource, events_dir)
        for logical_id, resource in functions(template).items()
    }
    return Written(
        env_file=out, template=sam_template, events=dict(sorted(events.items())), events_dir=events_dir
    )


# The hand-written events/ name the dev stage's queues (`aijobs-dev-summary-dlq`, ...).
EVENTS_STAGE = "dev"
SCHEDULE_TYPE = "AWS::Scheduler::Schedule"


def schedule_crons(template: Mapping[str, Any]) -> list[str]:
    """The cron expression each of the template's schedules sends the dispatcher, in order."""
    from aijobs.scheduled.dispatcher import PAYLOAD_CRON

    crons = []
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") == SCHEDULE_TYPE:
            payload = json.loads(resource["Properties"]["Target"]["Input"])
            crons.append(str(payload[PAYLOAD_CRON]))
    return crons


def _queue_arn(region: str, url: str) -> str:
    account, name = url.rstrip("/").rsplit("/", 2)[-2:]
    return f"arn:aws:sqs:{region}:{account}:{name}"


def write_events(
    template: Mapping[str, Any], env: Mapping[str, Mapping[str, str]], region: str, out_dir: Path
) -> Path:
    """The sample events into `out_dir`: one SQS batch per consumer from the queue it really reads
    (a consumer serves only the queue in its `QUEUE_URL`; production names are generated), one
    input per schedule, and the hand-written events/ with each SQS record's `eventSourceARN`
    naming the queue these functions read (the DLQ consumer only those in `DEAD_LETTER_QUEUES`)."""
    from aijobs_cli.local.sample_events import generated_events
    from aijobs_cli.local.sample_events import write_events as write_all

    queues: dict[str, str] = {}  # readable dev name -> the env's queue URL
    consumers: dict[str, str] = {}  # kind -> the ARN of the queue its consumer reads
    for variables in env.values():
        if "QUEUE_NAME" in variables:
            kind = variables["QUEUE_NAME"]
            readable = queue_resource_name(EVENTS_STAGE, kind)
            queues[readable] = variables["QUEUE_URL"]
            queues[readable + DLQ_SUFFIX] = variables["DLQ_URL"]
            consumers[kind] = _queue_arn(region, variables["QUEUE_URL"])

    def rewrite(event: dict[str, Any]) -> dict[str, Any]:
        for record in event.get("Records", []) if isinstance(event, dict) else []:
            url = queues.get(str(record.get("eventSourceARN", "")).rsplit(":", 1)[-1])
            if record.get("eventSource") == "aws:sqs" and url is not None:
                record["eventSourceARN"] = _queue_arn(region, url)
                record["awsRegion"] = region
        return event

    generated = generated_events(dict(sorted(consumers.items())), schedule_crons(template))
    try:
        write_all(out_dir, generated, rewrite)
    except ValueError as error:
        raise SamEnvError(str(error)) from None
    return out_dir


def _read_json(path: Path, what: str, *, hint: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SamEnvError(f"no {what} {path}: {hint}") from None
    except (OSError, json.JSONDecodeError) as error:
        raise SamEnvError(f"cannot read the {what} {path}: {error}") from None
    if not isinstance(data, dict):
        raise SamEnvError(f"{path} is not a JSON object")
    return data


def sample_events(resource: Mapping[str, Any], events_dir: Path) -> str:
    """A function's sample events (written by `write_events`), by its entry point."""
    properties = resource.get("Properties", {})
    role = str(properties.get("Handler", "")).split(".", 1)[0]
    kind = properties.get("Environment", {}).get("Variables", {}).get("QUEUE_NAME")
    pattern = {
        "api": "api-*.json",
        "queue_consumer": f"sqs-{kind}-batch.json",
        "dlq_consumer": "sqs-dlq-batch.json",
        "cron_dispatcher": "schedule-*.json",
        "webhook_consumer": "sqs-webhooks-batch.json",
    }.get(role)
    return "-" if pattern is None else str(events_dir / pattern)


def usage(written: Written) -> str:
    """What was written, each function's logical id with its sample events, and how to invoke."""
    lines = [f"wrote {written.env_file}: {len(written.events)} functions and their sample events"]
    width = max(len(logical_id) for logical_id in written.events)
    for logical_id, events in written.events.items():
        lines.append(f"  {logical_id:<{width}}  {events}")
    lines.append(
        f"invoke one with:\n  sam local invoke -t {written.template} <LogicalId> -e <event> "
        f"--env-vars {written.env_file}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aijobs_cli.local.sam_env",
        description="Write the --env-vars file for `sam local invoke` from a synthesized template.",
    )
    parser.add_argument("--template", type=Path, required=True, help="cdk.out/<stack>.template.json")
    parser.add_argument("--out", type=Path, default=Path(".aijobs/sam-env.json"), help="file to write")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="deployed stack name, e.g. aijobs-dev")
    source.add_argument("--info-file", type=Path, help="the local stack's file (aijobs dev --info-file)")
    parser.add_argument("--profile", help="AWS profile for --stack")
    parser.add_argument("--region", help="AWS region for --stack")
    parser.add_argument(
        "--endpoint-host",
        default=CONTAINER_HOST,
        help=f"how a SAM container reaches this machine (default {CONTAINER_HOST}; 127.0.0.1 with "
        "`sam local invoke --docker-network host` on Linux)",
    )
    args = parser.parse_args(argv)
    try:
        written = generate(
            args.template,
            args.out,
            stack=args.stack,
            profile=args.profile,
            region=args.region,
            info_file=args.info_file,
            endpoint_host=args.endpoint_host,
        )
    except SamEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(usage(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
