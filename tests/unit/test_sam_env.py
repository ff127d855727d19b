"""`aijobs_cli.local.sam_env`: template references resolved to real names, the files it writes, its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs_cli.local import sam_env
from aijobs_cli.local.sam_env import PhysicalResources, SamEnvError, build_env_vars

QUEUE_URL = "https://sqs.eu-west-1.amazonaws.com/111122223333/aijobs-dev-summary"


def resolver() -> PhysicalResources:
    return PhysicalResources(
        region="eu-west-1",
        account="111122223333",
        stack_name="aijobs-dev",
        resources={
            "Queue": ("AWS::SQS::Queue", QUEUE_URL),
            "Table": ("AWS::DynamoDB::Table", "aijobs-dev-TablesMeta-1A2B"),
            "Shard": ("AWS::DynamoDB::Table", "aijobs-dev-TablesShard1-3C4D"),
            "Topic": ("AWS::SNS::Topic", "arn:aws:sns:eu-west-1:111122223333:aijobs-dev-alerts"),
            "Bucket": ("AWS::S3::Bucket", "aijobs-dev-bucket-5e6f"),
            "Fn": ("AWS::Lambda::Function", "aijobs-dev-Api-7G8H"),
            "Api": ("AWS::ApiGatewayV2::Api", "abcdef1234"),
        },
        parameters={"Level": "INFO"},
    )


def template(variables: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "Resources": {
            "Consumer": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"Environment": {"Variables": variables}},
            },
            "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "aijobs-dev-summary"}},
            **extra,
        }
    }


def test_every_intrinsic_the_stack_may_use_resolves_to_a_string() -> None:
    env = build_env_vars(
        template(
            {
                "LITERAL": "dev",
                "NUMBER": 3,
                "QUEUE_URL": {"Ref": "Queue"},
                "QUEUE_ARN": {"Fn::GetAtt": ["Queue", "Arn"]},
                "QUEUE_NAME_ATTR": {"Fn::GetAtt": "Queue.QueueName"},
                "TABLES": {"Fn::Join": [",", [{"Ref": "Table"}, {"Ref": "Shard"}]]},
                "TABLE_ARN": {"Fn::GetAtt": ["Table", "Arn"]},
                "BUCKET_ARN": {"Fn::GetAtt": ["Bucket", "Arn"]},
                "SUB": {"Fn::Sub": "${AWS::Region}/${Fn.Arn}/${Bucket}/${!Literal}"},
                "SUB_VARS": {"Fn::Sub": ["${Name}-${AWS::AccountId}", {"Name": {"Ref": "Topic"}}]},
                "SELECT": {"Fn::Select": [4, {"Fn::Split": ["/", {"Ref": "Queue"}]}]},
                "API": {"Fn::GetAtt": ["Api", "ApiEndpoint"]},
                "PARAMETER": {"Ref": "Level"},
                "SUFFIX": {"Ref": "AWS::URLSuffix"},
            }
        ),
        resolver(),
    )
    assert env == {
        "Consumer": {
            "LITERAL": "dev",
            "NUMBER": "3",
            "QUEUE_URL": QUEUE_URL,
            "QUEUE_ARN": "arn:aws:sqs:eu-west-1:111122223333:aijobs-dev-summary",
            "QUEUE_NAME_ATTR": "aijobs-dev-summary",
            "TABLES": "aijobs-dev-TablesMeta-1A2B,aijobs-dev-TablesShard1-3C4D",
            "TABLE_ARN": "arn:aws:dynamodb:eu-west-1:111122223333:table/aijobs-dev-TablesMeta-1A2B",
            "BUCKET_ARN": "arn:aws:s3:::aijobs-dev-bucket-5e6f",
            "SUB": "eu-west-1/arn:aws:lambda:eu-west-1:111122223333:function:aijobs-dev-Api-7G8H/"
            "aijobs-dev-bucket-5e6f/${Literal}",
            "SUB_VARS": "arn:aws:sns:eu-west-1:111122223333:aijobs-dev-alerts-111122223333",
            "SELECT": "aijobs-dev-summary",
            "API": "https://abcdef1234.execute-api.eu-west-1.amazonaws.com",
            "PARAMETER": "INFO",
            "SUFFIX": "amazonaws.com",
        }
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"Ref": "Missing"}, "Consumer QUEUE: the stack has no resource 'Missing'"),
        ({"Fn::GetAtt": ["Table", "StreamArn"]}, "cannot derive Fn::GetAtt Table.StreamArn"),
        ({"Fn::If": ["IsProd", "a", "b"]}, "Fn::If is not supported"),
        ({"Fn::Split": [",", "a,b"]}, "resolves to a list"),
        ({"Ref": "AWS::NoValue"}, "no resource 'AWS::NoValue'"),
    ],
)
def test_what_cannot_be_resolved_fails_naming_the_function_and_variable(value: Any, message: str) -> None:
    with pytest.raises(SamEnvError, match=r"^Consumer QUEUE: ") as raised:
        build_env_vars(template({"QUEUE": value}), resolver())
    assert message in str(raised.value)


def test_a_function_without_environment_gets_an_empty_entry() -> None:
    bare = {"Resources": {"Fn": {"Type": "AWS::Lambda::Function", "Properties": {}}}}
    assert build_env_vars(bare, resolver()) == {"Fn": {}}


def test_the_deployed_stack_is_read_with_every_page_of_its_resources() -> None:
    client = boto3.client("cloudformation", region_name="eu-west-1")
    stack_id = "arn:aws:cloudformation:eu-west-1:111122223333:stack/aijobs-dev/0f1e2d3c"
    with Stubber(client) as stub:
        stub.add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackId": stack_id,
                        "StackName": "aijobs-dev",
                        "CreationTime": "2026-11-29T09:00:00Z",
                        "StackStatus": "UPDATE_COMPLETE",
                        "Parameters": [{"ParameterKey": "BootstrapVersion", "ParameterValue": "30"}],
                    }
                ]
            },
            {"StackName": "aijobs-dev"},
        )
        for page, (logical_id, resource_type, physical_id, token) in enumerate(
            [
                ("Queue", "AWS::SQS::Queue", QUEUE_URL, "page-2"),
                ("Table", "AWS::DynamoDB::Table", "aijobs-dev-TablesMeta-1A2B", None),
            ]
        ):
            response: dict[str, Any] = {
                "StackResourceSummaries": [
                    {
                        "LogicalResourceId": logical_id,
                        "PhysicalResourceId": physical_id,
                        "ResourceType": resource_type,
                        "LastUpdatedTimestamp": "2026-11-29T09:00:00Z",
                        "ResourceStatus": "CREATE_COMPLETE",
                    }
                ]
            }
            if token:
                response["NextToken"] = token
            expected = {"StackName": "aijobs-dev", **({"NextToken": "page-2"} if page else {})}
            stub.add_response("list_stack_resources", response, expected)
        resources = sam_env.read_stack(client, "aijobs-dev")
        stub.assert_no_pending_responses()
    assert (resources.region, resources.account, resources.partition) == ("eu-west-1", "111122223333", "aws")
    assert resources("Queue", "Arn") == "arn:aws:sqs:eu-west-1:111122223333:aijobs-dev-summary"
    assert resources("Table", None) == "aijobs-dev-TablesMeta-1A2B"
    assert resources("BootstrapVersion", None) == "30"


def test_a_stack_that_cannot_be_read_is_an_error_with_the_reason() -> None:
    client = boto3.client("cloudformation", region_name="eu-west-1")
    with Stubber(client) as stub:
        stub.add_client_error("describe_stacks", "ValidationError", "Stack with id aijobs-qa does not exist")
        with pytest.raises(SamEnvError, match=r"cannot read stack 'aijobs-qa': .*does not exist"):
            sam_env.read_stack(client, "aijobs-qa")


def test_container_url_keeps_scheme_and_port() -> None:
    assert sam_env.container_url("http://127.0.0.1:5123", "host.docker.internal") == (
        "http://host.docker.internal:5123"
    )
    assert sam_env.container_url("http://localhost:5123/x", "127.0.0.1") == "http://127.0.0.1:5123/x"


def test_local_mode_runs_every_kind_on_the_local_provider_and_declares_the_endpoint() -> None:
    overrides = sam_env.local_overrides(
        {"PROVIDER": "bedrock", "KIND_PROVIDERS": "summary=bedrock;tts-generate=polly;classify=bedrock"},
        "http://host.docker.internal:5123",
    )
    assert overrides == {
        "AWS_ENDPOINT_URL": "http://host.docker.internal:5123",
        "PROVIDER": "local",
        "KIND_PROVIDERS": "summary=local;tts-generate=local;classify=local",
        # The local provider's models (a Bedrock id would be refused by it), its fallbacks, no
        # allow-lists.
        "KIND_MODELS": "summary=local-text-1;tts-generate=local-tts-1;classify=local-text-1",
        "KIND_ALLOWED_MODELS": "",
        "KIND_FALLBACKS": "summary=local:local-text-2",
    }
    assert sam_env.local_overrides({"STAGE": "dev"}, "http://h:1") == {"AWS_ENDPOINT_URL": "http://h:1"}
    declared = sam_env.declare_endpoint(template({"STAGE": "dev"}))
    assert declared["Resources"]["Consumer"]["Properties"]["Environment"]["Variables"] == {
        "STAGE": "dev",
        "AWS_ENDPOINT_URL": "",
    }
    assert declared["Resources"]["Queue"] == template({})["Resources"]["Queue"]


# --- the command -----------------------------------------------------------------------------------


def _local_info(endpoint: str = "http://127.0.0.1:5123") -> dict[str, Any]:
    return {
        "stage": "local",
        "aws_endpoint_url": endpoint,
        "region": "us-east-1",
        "meta_table": "aijobs-local-meta",
        "shard_tables": ["aijobs-local-shard-0"],
        "bucket": "aijobs-local-jobs-local",
        "alert_topic_arn": "arn:aws:sns:us-east-1:123456789012:aijobs-local-alerts",
        "queue_urls": {"summary": f"{endpoint}/123456789012/aijobs-local-summary"},
        "dlq_urls": {"summary": f"{endpoint}/123456789012/aijobs-local-summary-dlq"},
        "webhook_queue_url": f"{endpoint}/123456789012/aijobs-local-webhooks",
        "webhook_dlq_url": f"{endpoint}/123456789012/aijobs-local-webhooks-dlq",
    }


def _stack_template() -> dict[str, Any]:
    return {
        "Resources": {
            "Consumer": {
                "Type": "AWS::Lambda::Function",
                "Metadata": {"aws:asset:path": "asset.abc"},
                "Properties": {
                    "Environment": {
                        "Variables": {
                            "QUEUE_URL": {"Ref": "SummaryQueue"},
                            "DLQ_URL": {"Ref": "SummaryDlq"},
                            "META_TABLE_NAME": {"Ref": "Meta"},
                            "PROVIDER": "bedrock",
                        }
                    }
                },
            },
            "SummaryQueue": {"Type": "AWS::SQS::Queue"},
            "SummaryDlq": {"Type": "AWS::SQS::Queue"},
            "Meta": {"Type": "AWS::DynamoDB::Table"},
        },
        "Outputs": {
            "QueueUrlQSUMMARY": {"Value": {"Ref": "SummaryQueue"}},
            "DlqUrlQSUMMARY": {"Value": {"Ref": "SummaryDlq"}},
            "MetaTableName": {"Value": {"Ref": "Meta"}},
        },
    }


def test_main_writes_the_env_file_and_a_template_declaring_the_endpoint_for_the_local_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template_path = tmp_path / "cdk.out" / "aijobs-dev.template.json"
    template_path.parent.mkdir()
    template_path.write_text(json.dumps(_stack_template()))
    info = tmp_path / "local.json"
    info.write_text(json.dumps(_local_info()))
    out = tmp_path / ".aijobs" / "sam-env.json"

    code = sam_env.main(["--template", str(template_path), "--info-file", str(info), "--out", str(out)])

    assert code == 0
    local_template = tmp_path / "cdk.out" / "aijobs-dev.local.template.json"
    assert json.loads(out.read_text()) == {
        "Consumer": {
            "QUEUE_URL": "http://host.docker.internal:5123/123456789012/aijobs-local-summary",
            "DLQ_URL": "http://host.docker.internal:5123/123456789012/aijobs-local-summary-dlq",
            "META_TABLE_NAME": "aijobs-local-meta",
            "PROVIDER": "local",
            "AWS_ENDPOINT_URL": "http://host.docker.internal:5123",
        }
    }
    written = json.loads(local_template.read_text())["Resources"]["Consumer"]
    assert written["Properties"]["Environment"]["Variables"]["AWS_ENDPOINT_URL"] == ""
    assert written["Metadata"] == {"aws:asset:path": "asset.abc"}  # assets still next to it
    printed = capsys.readouterr().out
    assert f"sam local invoke -t {local_template} <LogicalId> -e <event> --env-vars {out}" in printed
    assert "  Consumer  -\n" in printed  # no Handler: no sample event to suggest


def test_main_on_linux_host_networking_keeps_the_loopback_endpoint(tmp_path: Path) -> None:
    template_path = tmp_path / "aijobs-dev.template.json"
    template_path.write_text(json.dumps(_stack_template()))
    info = tmp_path / "local.json"
    info.write_text(json.dumps(_local_info()))
    out = tmp_path / "env.json"
    args = ["--template", str(template_path), "--info-file", str(info), "--out", str(out)]
    assert sam_env.main([*args, "--endpoint-host", "127.0.0.1"]) == 0
    assert json.loads(out.read_text())["Consumer"]["AWS_ENDPOINT_URL"] == "http://127.0.0.1:5123"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no-template", "no template"),
        ("no-info", "start the local stack: aijobs dev --info-file"),
        ("not-a-stack", "has no AWS::Lambda::Function"),
        ("old-info", "the info file lacks 'dlq_urls'"),
        ("other-stage", "the local stack (its info file) has no resource 'SummaryQueue'"),
    ],
)
def test_main_exits_non_zero_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    template_path = tmp_path / "aijobs-dev.template.json"
    info_path = tmp_path / "local.json"
    info = _local_info()
    if setup != "no-template":
        template_path.write_text(
            json.dumps({"Resources": {}} if setup == "not-a-stack" else _stack_template())
        )
    if setup == "old-info":
        del info["dlq_urls"]
    if setup == "other-stage":
        info["queue_urls"] = {"embedding": info["queue_urls"]["summary"]}
    if setup != "no-info":
        info_path.write_text(json.dumps(info))
    out = tmp_path / "env.json"
    code = sam_env.main(["--template", str(template_path), "--info-file", str(info_path), "--out", str(out)])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_main_takes_exactly_one_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for extra in ([], ["--stack", "aijobs-dev", "--info-file", "x.json"]):
        with pytest.raises(SystemExit) as raised:
            sam_env.main(["--template", "t.json", *extra])
        assert raised.value.code == 2
    assert "--stack" in capsys.readouterr().err
    with pytest.raises(SamEnvError, match="exactly one of --stack"):
        sam_env.generate(tmp_path / "t.json", tmp_path / "out.json")


def test_a_deployed_stack_needs_a_region(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(SamEnvError, match="no AWS region"):
        sam_env.cloudformation_client(profile=None, region=None)


def test_the_cli_command_refuses_bad_input_with_a_message(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from aijobs_cli.main import app

    missing = CliRunner().invoke(app, ["sam-env", "--template", str(tmp_path / "none.json")])
    assert missing.exit_code == 1
    assert "no template" in missing.output
    both = CliRunner().invoke(
        app, ["sam-env", "--template", "t.json", "--stack", "aijobs-dev", "--info-file", "x.json"]
    )
    assert both.exit_code == 1
    assert "not both" in both.output
