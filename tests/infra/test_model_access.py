"""Least privilege for AI providers: each function may call only the models of its own kind."""

from __future__ import annotations

import json
from typing import Any

from tests.infra.template import Synth, role_statements


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def _consumer(synth: Synth, kind: str) -> str:
    (function_id,) = [
        logical_id
        for logical_id, props in synth.functions_by_handler("queue_consumer.handler.handler").items()
        if props["Environment"]["Variables"]["QUEUE_NAME"] == kind
    ]
    return function_id


def _granted(synth: Synth, function_id: str, prefix: str) -> dict[str, str]:
    """action -> JSON of the resources it is granted on (every statement's), for one service."""
    granted: dict[str, str] = {}
    for statement in role_statements(synth, function_id):
        for action in _actions(statement):
            if action.startswith(prefix):
                granted[action] = granted.get(action, "") + json.dumps(statement["Resource"])
    return granted


def test_each_bedrock_consumer_may_invoke_only_its_kinds_models(dev: Synth) -> None:
    summary = _granted(dev, _consumer(dev, "summary"), "bedrock:")
    assert set(summary) == {"bedrock:InvokeModel"}
    # A cross-region inference profile: the profile and the one model it routes to.
    assert "inference-profile/us.amazon.nova-lite-v1:0" in summary["bedrock:InvokeModel"]
    assert "foundation-model/amazon.nova-lite-v1:0" in summary["bedrock:InvokeModel"]
    assert "stability" not in summary["bedrock:InvokeModel"]
    # Its fallback model too (aijobs/kinds/summary.py).
    assert "inference-profile/us.amazon.nova-pro-v1:0" in summary["bedrock:InvokeModel"]
    image = _granted(dev, _consumer(dev, "image-generate"), "bedrock:")
    assert "foundation-model/stability.stable-image-core-v1:1" in image["bedrock:InvokeModel"]
    assert "nova-lite" not in image["bedrock:InvokeModel"]


def test_every_deployed_kind_may_call_exactly_the_models_its_plan_names(dev: Synth) -> None:
    """The IAM part of every declared kind's contract, read from the stage's plans."""
    from aijobs_cdk.stage import load_stage_config

    config = load_stage_config("dev")
    for kind in config.queue_names:
        plan = config.plan(kind)
        models = list(plan.choosable_models) if plan.provider == "bedrock" else []
        models += [model for provider, model in plan.chain[1:] if provider == "bedrock" and model]
        granted = _granted(dev, _consumer(dev, kind), "bedrock:").get("bedrock:InvokeModel", "")
        for model in models:
            base = model.split(".", 1)[1] if model.startswith(("us.", "global.", "eu.")) else model
            assert f"foundation-model/{base}" in granted, (kind, model)
        if not models:
            assert granted == "", kind


def test_marketplace_models_may_subscribe_and_first_party_ones_need_not(dev: Synth) -> None:
    image = _granted(dev, _consumer(dev, "image-generate"), "aws-marketplace:")
    assert set(image) == {"aws-marketplace:ViewSubscriptions", "aws-marketplace:Subscribe"}
    assert _granted(dev, _consumer(dev, "summary"), "aws-marketplace:") == {}


def test_the_video_consumer_may_start_and_read_its_async_invocations(dev: Synth) -> None:
    video = _granted(dev, _consumer(dev, "video-generate"), "bedrock:")
    # StartAsyncInvoke is authorized by bedrock:InvokeModel; IAM has no bedrock:StartAsyncInvoke.
    assert set(video) == {"bedrock:InvokeModel", "bedrock:GetAsyncInvoke"}
    assert "foundation-model/luma.ray-v2:0" in video["bedrock:InvokeModel"]
    assert "async-invoke/*" in video["bedrock:GetAsyncInvoke"]


def test_only_tts_may_use_polly_and_it_may_not_use_bedrock(dev: Synth) -> None:
    tts = _consumer(dev, "tts-generate")
    assert set(_granted(dev, tts, "polly:")) == {
        "polly:SynthesizeSpeech",
        "polly:StartSpeechSynthesisTask",
        "polly:GetSpeechSynthesisTask",
    }
    assert _granted(dev, tts, "bedrock:") == {}
    for kind in ("summary", "embedding", "image-generate", "video-generate"):
        assert _granted(dev, _consumer(dev, kind), "polly:") == {}


def test_the_producer_may_invoke_only_the_classify_model(dev: Synth) -> None:
    (producer,) = dev.functions_by_handler("api.handler.handler")
    granted = _granted(dev, producer, "bedrock:")
    assert set(granted) == {"bedrock:InvokeModel"}
    assert "nova-micro" in granted["bedrock:InvokeModel"]
    assert "nova-lite" not in granted["bedrock:InvokeModel"]


def test_allow_listed_models_are_granted_and_openai_kinds_read_only_their_secret(capped: Synth) -> None:
    summary = _granted(capped, _consumer(capped, "summary"), "bedrock:")
    assert "foundation-model/amazon.nova-pro-v1:0" in summary["bedrock:InvokeModel"]
    embedding = _consumer(capped, "embedding")
    assert _granted(capped, embedding, "bedrock:") == {}
    secret = _granted(capped, embedding, "secretsmanager:")
    assert set(secret) == {"secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"}
    assert "secret:aijobs/openai-key-??????" in secret["secretsmanager:GetSecretValue"]
    assert _granted(capped, _consumer(capped, "summary"), "secretsmanager:") == {}


# --- the weekly model check ------------------------------------------------------------------------


def _lifecycle_reads(synth: Synth) -> list[dict[str, Any]]:
    (dispatcher,) = synth.functions_by_handler("cron_dispatcher.handler.handler")
    return [
        statement
        for statement in role_statements(synth, dispatcher)
        if any(action.startswith("bedrock:") for action in _actions(statement))
    ]


def _arn_text(resource: Any) -> str:
    """`arn:<partition>:bedrock:<region>::foundation-model/<id>` from the template's Fn::Join."""
    if isinstance(resource, str):
        return resource
    separator, parts = resource["Fn::Join"]
    return str(separator).join(part if isinstance(part, str) else f"<{part['Ref']}>" for part in parts)


def test_the_cron_may_read_the_lifecycle_of_exactly_the_stages_bedrock_models(dev: Synth) -> None:
    (statement,) = _lifecycle_reads(dev)
    assert _actions(statement) == ["bedrock:GetFoundationModel"]
    resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
    region = "arn:<AWS::Partition>:bedrock:<AWS::Region>::foundation-model/"
    # Each kind's default and allow-listed models, an inference profile as the model it routes to,
    # in the stack's own region; speech (Polly) has none.
    from aijobs.providers.lifecycle import bedrock_models

    expected = sorted(region + model for model in bedrock_models(dev.config.provider_plans))
    assert sorted(_arn_text(r) for r in resources) == expected
    # Among them: an inference profile's model, an allowed model, a third-party default.
    assert {region + m for m in ("amazon.nova-lite-v1:0", "amazon.nova-pro-v1:0", "luma.ray-v2:0")} <= set(
        expected
    )
    assert "*" not in json.dumps(resources)


def test_a_stage_that_does_not_schedule_the_model_check_grants_no_lifecycle_read(capped: Synth) -> None:
    assert "0 6 * * 1" not in {cron.text for cron in capped.config.crons}
    assert _lifecycle_reads(capped) == []
