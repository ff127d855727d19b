"""Provider and model per kind, per stage: validated at synth with errors that name the entry."""

from __future__ import annotations

import pytest

from aijobs.provider_plan import base_model_id, is_inference_profile, plans_from_setting, plans_setting
from aijobs.stage_config import ConfigError, StageConfig, parse_stage_config

KINDS = "summary;embedding;image-generate;image-caption;tts-generate;video-generate"


def _config(stage: str = "dev", **values: str) -> StageConfig:
    return parse_stage_config(stage, {"QUEUE_NAMES": KINDS, **values})


def test_deployed_stages_default_to_bedrock_with_polly_for_speech() -> None:
    config = _config()
    providers = {plan.kind: plan.provider for plan in config.provider_plans}
    assert providers == {
        "summary": "bedrock",
        "embedding": "bedrock",
        "image-generate": "bedrock",
        "image-caption": "bedrock",
        "tts-generate": "polly",
        "video-generate": "bedrock",
        "classify": "bedrock",
    }
    assert config.plan("embedding").model == "amazon.titan-embed-text-v2:0"
    assert config.plan("tts-generate").model is None


def test_the_local_stage_defaults_to_the_local_provider() -> None:
    assert {plan.provider for plan in _config("local").provider_plans} == {"local"}


def test_per_kind_providers_and_models_with_colons_and_profiles() -> None:
    config = _config(
        KIND_PROVIDERS="embedding=openai; tts-generate=polly",
        KIND_MODELS="summary=us.amazon.nova-pro-v1:0;embedding=text-embedding-3-large",
        KIND_ALLOWED_MODELS="summary=amazon.nova-lite-v1:0, us.amazon.nova-micro-v1:0",
        OPENAI_SECRET_NAME="prod/openai",
    )
    summary = config.plan("summary")
    assert (summary.provider, summary.model) == ("bedrock", "us.amazon.nova-pro-v1:0")
    assert summary.choosable_models == (
        "us.amazon.nova-pro-v1:0",
        "amazon.nova-lite-v1:0",
        "us.amazon.nova-micro-v1:0",
    )
    assert (config.plan("embedding").provider, config.plan("embedding").model) == (
        "openai",
        "text-embedding-3-large",
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"PROVIDER": "gemini"}, "PROVIDER='gemini' is not one of"),
        ({"KIND_PROVIDERS": "summary=gemini"}, "KIND_PROVIDERS: summary='gemini'"),
        (
            {"KIND_PROVIDERS": "summari=bedrock"},
            r"KIND_PROVIDERS names kinds that are not in QUEUE_NAMES.*summari",
        ),
        ({"KIND_MODELS": "nope=x"}, r"KIND_MODELS names kinds .*nope"),
        ({"KIND_PROVIDERS": "tts-generate=bedrock"}, "provider 'bedrock' cannot run kind 'tts-generate'"),
        ({"KIND_PROVIDERS": "summary=polly"}, "provider 'polly' cannot run kind 'summary'"),
        ({"KIND_PROVIDERS": "video-generate=openai"}, "cannot run kind 'video-generate'"),
        ({"KIND_MODELS": "summary"}, r"KIND_MODELS: 'summary' must be <kind>=<value>"),
        ({"KIND_MODELS": "summary=a b"}, r"KIND_MODELS: summary='a b' is not a model id"),
        ({"KIND_MODELS": "summary=a;summary=b"}, "listed twice"),
        ({"KIND_ALLOWED_MODELS": "summary=ok,bad model"}, "KIND_ALLOWED_MODELS: summary='bad model'"),
        ({"KIND_PROVIDERS": "embedding=openai"}, "set OPENAI_SECRET_NAME"),
        ({"OPENAI_BASE_URL": "ftp://example.com"}, "OPENAI_BASE_URL='ftp://example.com' must be an http"),
        ({"OPENAI_BASE_URL": "http://gateway.example.com/v1"}, "must use https on a deployed stage"),
        ({"OPENAI_SECRET_NAME": "has space"}, "OPENAI_SECRET_NAME='has space'"),
    ],
)
def test_bad_provider_entries_fail_with_the_entry_named(values: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(**values)


def test_a_kind_of_your_own_may_use_any_provider_without_a_model() -> None:
    config = parse_stage_config("dev", {"QUEUE_NAMES": "translate"})
    assert (config.plan("translate").provider, config.plan("translate").model) == ("bedrock", None)


def test_the_local_stage_may_point_at_a_plain_http_openai_server_with_its_key_from_the_shell() -> None:
    config = _config("local", KIND_PROVIDERS="summary=openai", OPENAI_BASE_URL="http://127.0.0.1:11434/v1/")
    assert config.openai_base_url == "http://127.0.0.1:11434/v1"
    assert config.openai_secret_name is None


def test_functions_read_back_exactly_the_validated_plan() -> None:
    config = _config(KIND_ALLOWED_MODELS="summary=amazon.nova-pro-v1:0")
    env = config.consumer_settings_env("tts-generate")
    assert env["PROVIDER"] == "polly"
    plans = plans_from_setting(plans_setting(config.provider_plans))
    assert plans == {plan.kind: plan for plan in config.provider_plans}
    assert config.api_settings_env()["PROVIDER"] == config.plan("classify").provider


@pytest.mark.parametrize(
    ("model", "base", "profile"),
    [
        ("us.amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0", True),
        ("eu.anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku-20240307-v1:0", True),
        ("amazon.titan-embed-text-v2:0", "amazon.titan-embed-text-v2:0", False),
    ],
)
def test_inference_profile_ids(model: str, base: str, profile: bool) -> None:
    assert base_model_id(model) == base
    assert is_inference_profile(model) is profile


def test_entries_for_shipped_kinds_the_stage_does_not_enable_are_skipped() -> None:
    config = parse_stage_config(
        "dev", {"QUEUE_NAMES": "summary", "KIND_MODELS": "video-generate=amazon.nova-reel-v1:0"}
    )
    assert [plan.kind for plan in config.provider_plans] == ["summary", "classify"]
