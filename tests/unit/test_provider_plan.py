"""Provider and model per kind, per stage: derived from the kinds' declarations and the stage's
overrides, validated at synth with errors that name the entry."""

from __future__ import annotations

import pytest

from aijobs.kinds.base import Kind
from aijobs.kinds.registry import declared, queued, require
from aijobs.provider_plan import (
    PROVIDER_CAPABILITIES,
    ProviderPlanError,
    base_model_id,
    is_inference_profile,
    plans_from_setting,
    plans_setting,
)
from aijobs_cdk.provider_plans import parse_provider_plan
from aijobs_cdk.stage_config import ConfigError, StageConfig, parse_stage_config

QUEUED = queued()
KINDS = ";".join(QUEUED)


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
        ({"KIND_PROVIDERS": "summary=gemini"}, "KIND_PROVIDERS: summary: provider 'gemini' is not one of"),
        (
            {"KIND_PROVIDERS": "summari=bedrock"},
            r"KIND_PROVIDERS names kinds that are not declared.*summari",
        ),
        ({"KIND_MODELS": "nope=x"}, r"KIND_MODELS names kinds .*nope"),
        (
            {"KIND_PROVIDERS": "tts-generate=bedrock"},
            r"kind 'tts-generate' needs the speech capability, which provider 'bedrock' does not offer "
            r"\(providers that do: \['local', 'polly'\]\)",
        ),
        (
            {"KIND_PROVIDERS": "summary=polly"},
            "kind 'summary' needs the text capability, which provider 'polly'",
        ),
        ({"KIND_PROVIDERS": "video-generate=openai"}, "needs the video capability, which provider 'openai'"),
        (
            {"KIND_FALLBACKS": "summary=openai"},
            r"KIND_FALLBACKS: summary: 'openai' must be <provider>:<model>",
        ),
        ({"KIND_FALLBACKS": "summary=polly:x"}, "KIND_FALLBACKS: kind 'summary' needs the text capability"),
        (
            {"QUEUE_NAMES": KINDS + ";report", "KIND_FALLBACKS": "report=bedrock:x"},
            r"KIND_FALLBACKS: \['report'\] are workflows",
        ),
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


def test_an_undeclared_name_is_planned_without_a_model_for_the_synth_to_refuse() -> None:
    # The parser alone lets tools and tests name any queue; the synth refuses an undeclared one
    # (tests/infra/test_stage_files.py).
    config = parse_stage_config("dev", {"QUEUE_NAMES": "no-such-kind"})
    assert (config.plan("no-such-kind").provider, config.plan("no-such-kind").model) == ("bedrock", None)


def test_every_declared_kind_has_a_plan_on_every_provider_that_offers_its_capability() -> None:
    for name in declared():
        kind = require(name)
        for provider, capabilities in PROVIDER_CAPABILITIES.items():
            if kind.capability not in capabilities:
                continue
            if provider not in ("local", "polly") and provider not in kind.models:
                continue  # it declares no model there: the stage must give one (next test)
            (plan,) = [p for p in parse_provider_plan(
                stage="dev", kinds=(name,), default_provider="bedrock",
                kind_providers=f"{name}={provider}",
            ) if p.kind == name]  # fmt: skip
            assert plan.provider == provider
            assert plan.capability == kind.capability
            if provider == "local":
                assert plan.model is not None
                assert plan.model.startswith("local-")


def _text_kind(**fields: object) -> Kind:
    values: dict[str, object] = {
        "name": "translate",
        "capability": "text",
        "description": "a translation",
        "models": {"local": "local-text-1"},
    }
    return Kind(**{**values, **fields})  # type: ignore[arg-type]


def test_a_kind_without_a_model_on_the_stage_provider_runs_where_it_declares_one() -> None:
    translate = _text_kind(models={"openai": "gpt-4o-mini"})
    (plan, _) = parse_provider_plan(
        stage="dev", kinds=("translate",), default_provider="bedrock",
        declarations={"translate": translate, "classify": require("classify")},
    )  # fmt: skip
    assert (plan.provider, plan.model) == ("openai", "gpt-4o-mini")


def test_a_kind_with_no_model_where_it_must_run_names_the_fix() -> None:
    with pytest.raises(
        ProviderPlanError, match="kind 'translate' runs on bedrock but declares no bedrock model"
    ):
        parse_provider_plan(
            stage="dev", kinds=("translate",), default_provider="bedrock", kind_providers="translate=bedrock",
            declarations={"translate": _text_kind(), "classify": require("classify")},
        )  # fmt: skip
    with pytest.raises(ProviderPlanError, match="declares no model on a provider that does"):
        parse_provider_plan(
            stage="dev", kinds=("translate",), default_provider="polly",
            declarations={"translate": _text_kind(), "classify": require("classify")},
        )  # fmt: skip


def test_fallbacks_come_from_the_declaration_per_provider_or_from_the_stage() -> None:
    declared_chain = _config().plan("summary").fallbacks
    assert declared_chain == require("summary").fallbacks["bedrock"]
    assert _config("local").plan("summary").fallbacks == ("local:local-text-2",)
    config = _config(KIND_FALLBACKS="summary=openai:gpt-4o-mini, bedrock:us.amazon.nova-pro-v1:0",
                     OPENAI_SECRET_NAME="prod/openai")  # fmt: skip
    plan = config.plan("summary")
    assert plan.chain == (
        ("bedrock", "us.amazon.nova-lite-v1:0"),
        ("openai", "gpt-4o-mini"),
        ("bedrock", "us.amazon.nova-pro-v1:0"),
    )
    assert plans_from_setting(config.consumer_settings_env("summary"))["summary"].fallbacks == plan.fallbacks


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
        "dev", {"QUEUE_NAMES": "summary", "KIND_MODELS": "video-generate=luma.ray-v2:0"}
    )
    assert [plan.kind for plan in config.provider_plans] == ["summary", "classify"]
