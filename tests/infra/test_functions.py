"""Lambda defaults, each function's environment against its settings model, and IAM scope."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from moto import mock_aws

from aijobs import runtime
from aijobs.settings import (
    ApiSettings,
    ConsumerSettings,
    CronSettings,
    DlqSettings,
    FunctionSettings,
    WebhookSettings,
)
from aijobs_cdk.constructs.model_access import MARKETPLACE_ACTIONS, POLLY_ACTIONS
from aijobs_cdk.constructs.schedules import INVOKE_RETRY_ATTEMPTS
from tests.infra.template import Synth, symbolic_environment, target_id

pytestmark = pytest.mark.infra

SETTINGS_BY_HANDLER: dict[str, type[FunctionSettings]] = {
    "api.handler.handler": ApiSettings,
    "queue_consumer.handler.handler": ConsumerSettings,
    "dlq_consumer.handler.handler": DlqSettings,
    "cron_dispatcher.handler.handler": CronSettings,
    "webhook_consumer.handler.handler": WebhookSettings,
}
# Actions without resource-level permissions; nothing else may use a bare "*".
# Actions that support no resource-level permissions (Polly's only scope lexicons, which we do not use).
UNSCOPED_ACTIONS = {
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "lambda:ListEventSourceMappings",
    *POLLY_ACTIONS,
    # Bedrock's first call of a Marketplace model (Stability AI, Luma) subscribes the account.
    *MARKETPLACE_ACTIONS,
}


@pytest.mark.parametrize("fixture", ["dev", "capped", "single_consumer"])
def test_every_function_environment_satisfies_its_settings_model(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    functions = synth.resources("AWS::Lambda::Function")
    handlers = {props["Properties"]["Handler"] for props in functions.values()}
    assert handlers == set(SETTINGS_BY_HANDLER), (
        "a function without a settings model, or a model without a function"
    )
    for logical_id, resource in functions.items():
        props = resource["Properties"]
        model = SETTINGS_BY_HANDLER[props["Handler"]]
        settings = model.from_env(symbolic_environment(props))
        assert settings.stage == synth.config.stage, logical_id


def test_api_settings_get_one_queue_url_per_configured_kind(dev: Synth) -> None:
    (props,) = dev.functions_by_handler("api.handler.handler").values()
    settings = ApiSettings.from_env(symbolic_environment(props))
    assert set(settings.queue_urls) == set(dev.config.queue_names)
    for kind, binding in dev.config.bindings.items():
        assert target_id(props["Environment"]["Variables"][binding]) in dev.json["Resources"], kind


def test_settings_model_rejects_an_environment_missing_a_queue_url(dev: Synth) -> None:
    (props,) = dev.functions_by_handler("api.handler.handler").values()
    env = symbolic_environment(props)
    del env["Q_SUMMARY"]
    with pytest.raises(ValueError, match="Q_SUMMARY"):
        ApiSettings.from_env(env)


def test_functions_share_one_set_of_defaults(dev: Synth) -> None:
    functions = dev.resources("AWS::Lambda::Function")
    # A consumer per kind, the API, the DLQ consumer, the cron dispatcher, the webhook consumer.
    assert len(functions) == len(dev.config.queue_names) + 4
    for logical_id, resource in functions.items():
        props = resource["Properties"]
        runtime = props["Runtime"]
        assert runtime.startswith("python3."), logical_id
        assert int(runtime.split(".")[1]) >= 12, logical_id
        assert props["Architectures"] == ["arm64"]
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        assert len(props["Layers"]) == 2  # third-party deps + the aijobs code layer
        env = props["Environment"]["Variables"]
        assert env["POWERTOOLS_SERVICE_NAME"] == "aijobs-dev"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "aijobs"
        log_group = dev.props(target_id(props["LoggingConfig"]["LogGroup"]))
        assert log_group["RetentionInDays"] == 14  # LOG_RETENTION_DAYS=14 in .env.dev


# Each function's memory as chosen from scripts/benchmark_memory.py (docs/operations/cost.md,
# "Memory per function"): the stage's CONSUMER_MEMORY_MB for a text kind, 512 for the kinds whose
# consumer holds the model's media bytes (their declarations), 256 for every other function.
MEDIA_MEMORY_MB = {"image-generate": 512, "tts-generate": 512}


def test_each_function_gets_the_memory_chosen_for_it(dev: Synth) -> None:
    assert dev.config.consumer_memory_mb == 256
    for handler in ("api", "dlq_consumer", "cron_dispatcher", "webhook_consumer"):
        (props,) = dev.functions_by_handler(f"{handler}.handler.handler").values()
        assert props["MemorySize"] == 256, handler
    consumers = dev.functions_by_handler("queue_consumer.handler.handler").values()
    memory = {props["Environment"]["Variables"]["QUEUE_NAME"]: props["MemorySize"] for props in consumers}
    assert memory == {kind: MEDIA_MEMORY_MB.get(kind, 256) for kind in dev.config.queue_names}
    assert memory["video-generate"] == 256  # the provider writes the video to S3: no bytes held


def test_each_function_has_its_own_role_without_managed_policies(dev: Synth) -> None:
    roles = [target_id(r["Properties"]["Role"]) for r in dev.resources("AWS::Lambda::Function").values()]
    assert len(set(roles)) == len(roles)
    for role_id in roles:
        assert "ManagedPolicyArns" not in dev.props(role_id)


def test_no_policy_grants_a_bare_wildcard_except_unscopable_actions(dev: Synth) -> None:
    for logical_id, policy in dev.resources("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = (
                statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            )
            assert "*" not in actions, logical_id
            if "*" in resources:
                assert set(actions) <= UNSCOPED_ACTIONS, (logical_id, actions)


def test_cron_dispatcher_retries_only_a_crashed_invocation_a_bounded_number_of_times(dev: Synth) -> None:
    # A failed run is handled (and alerted) by the dispatcher itself and returns normally; only an
    # invocation that crashed is retried, then dead-lettered (test_schedules_dead_letters.py).
    (config,) = dev.resources("AWS::Lambda::EventInvokeConfig").values()
    assert config["Properties"]["MaximumRetryAttempts"] == INVOKE_RETRY_ATTEMPTS <= 2
    assert "OnFailure" in config["Properties"]["DestinationConfig"]
    (dispatcher_id,) = dev.functions_by_handler("cron_dispatcher.handler.handler")
    assert config["Properties"]["FunctionName"] == {"Ref": dispatcher_id}


def test_each_consumer_may_disable_only_its_own_event_source_mapping(dev: Synth) -> None:
    consumers = dev.functions_by_handler("queue_consumer.handler.handler")
    allowed: dict[str, str] = {}
    for policy in dev.resources("AWS::IAM::Policy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Action"] == "lambda:UpdateEventSourceMapping":
                function = statement["Condition"]["StringEquals"]["lambda:FunctionArn"]
                (role,) = policy["Properties"]["Roles"]
                allowed[target_id(role)] = target_id(function)
    assert {target_id(props["Role"]): fn for fn, props in consumers.items()} == allowed


def test_api_key_mode_has_no_gateway_authorizer(dev: Synth) -> None:
    assert dev.resources("AWS::ApiGatewayV2::Authorizer") == {}
    (api,) = dev.functions_by_handler("api.handler.handler").values()
    assert api["Environment"]["Variables"]["AUTH_MODE"] == "api_key"
    assert api["Environment"]["Variables"]["JWT_OPERATOR_GROUP"] == "aijobs-operators"


def test_jwt_mode_puts_a_jwt_authorizer_on_every_route(capped: Synth) -> None:
    ((authorizer_id, authorizer),) = capped.resources("AWS::ApiGatewayV2::Authorizer").items()
    props = authorizer["Properties"]
    assert props["AuthorizerType"] == "JWT"
    assert props["JwtConfiguration"] == {
        "Audience": ["example-client-id"],
        "Issuer": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
    }
    routes = capped.resources("AWS::ApiGatewayV2::Route")
    assert routes
    for route in routes.values():
        assert route["Properties"]["AuthorizationType"] == "JWT"
        assert route["Properties"]["AuthorizerId"] == {"Ref": authorizer_id}
    (api,) = capped.functions_by_handler("api.handler.handler").values()
    assert api["Environment"]["Variables"]["AUTH_MODE"] == "jwt"
    assert api["Environment"]["Variables"]["JWT_OPERATOR_GROUP"] == "platform-oncall"


def _statements_of(synth: Synth, handler: str) -> list[dict[str, Any]]:
    (function_id,) = synth.functions_by_handler(handler).values()
    role = target_id(function_id["Role"])
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in [target_id(r) for r in policy["Properties"]["Roles"]]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_cron_dispatcher_may_write_only_its_own_records_in_the_meta_table(dev: Synth) -> None:
    """Its run records, the adaptive concurrency state (`FLOW#<kind>`) and the model check's alert
    markers (`MODEL#<model id>`)."""
    (meta_id,) = [
        logical_id
        for logical_id, table in dev.resources("AWS::DynamoDB::Table").items()
        if "Meta" in logical_id
    ]
    writes = [
        s
        for s in _statements_of(dev, "cron_dispatcher.handler.handler")
        if any(a in ("dynamodb:PutItem", "dynamodb:UpdateItem") for a in _actions(s))
        and meta_id in json.dumps(s["Resource"])
    ]
    assert sorted(s["Condition"]["ForAllValues:StringLike"]["dynamodb:LeadingKeys"] for s in writes) == [
        ["CRONRUN#*"],
        ["FLOW#*"],
        ["MODEL#*"],
    ]
    assert all(set(s["Condition"]) == {"ForAllValues:StringLike"} for s in writes)


def test_producer_may_read_uploaded_inputs_to_check_they_exist(dev: Synth) -> None:
    reads = [
        s
        for s in _statements_of(dev, "api.handler.handler")
        if "s3:GetObject" in _actions(s) and "/inputs/*" in json.dumps(s["Resource"])
    ]
    assert reads


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def test_every_function_skips_pydantics_plugin_scan_at_cold_start(dev: Synth) -> None:
    for logical_id, resource in dev.resources("AWS::Lambda::Function").items():
        variables = resource["Properties"]["Environment"]["Variables"]
        assert variables["PYDANTIC_DISABLE_PLUGINS"] == "__all__", logical_id


# What a function's first invocation builds from its environment (settings, provider adapters,
# clients), by handler. The rest of the suite runs the local provider; the shipped stages run
# Bedrock and Polly, so their templates are built here as deployed.
FIRST_INVOCATION_BY_HANDLER: dict[str, Callable[[], object]] = {
    "api.handler.handler": runtime.api_service,
    "queue_consumer.handler.handler": runtime.consumer,
    "dlq_consumer.handler.handler": runtime.dead_letter_consumer,
    "cron_dispatcher.handler.handler": runtime.cron_context,
    "webhook_consumer.handler.handler": runtime.webhook_consumer,
}


@pytest.mark.parametrize("fixture", ["dev", "prod"])
def test_every_function_of_a_shipped_template_builds_from_its_own_environment(
    fixture: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    synth: Synth = request.getfixturevalue(fixture)
    functions = synth.resources("AWS::Lambda::Function")
    assert set(FIRST_INVOCATION_BY_HANDLER) == {f["Properties"]["Handler"] for f in functions.values()}
    with mock_aws():
        for logical_id, resource in functions.items():
            props = resource["Properties"]
            with monkeypatch.context() as patch:
                for key, value in symbolic_environment(props).items():
                    patch.setenv(key, value)
                runtime.reset_runtime()
                try:
                    FIRST_INVOCATION_BY_HANDLER[props["Handler"]]()
                except Exception as error:  # named with the function that failed
                    pytest.fail(f"{fixture}: {logical_id} fails to build: {error!r}")
    runtime.reset_runtime()
