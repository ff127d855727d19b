"""Which Bedrock models a stage calls, and what GetFoundationModel says of each (botocore Stubber)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from aijobs.provider_plan import KindPlan
from aijobs.providers.lifecycle import (
    ACTIVE,
    END_OF_LIFE,
    LEGACY,
    NOT_FOUND,
    UNKNOWN,
    bedrock_models,
    check_model,
    check_models,
)
from aijobs_cdk.provider_plans import parse_provider_plan

# AWS's answer once a model's life has ended (GetFoundationModel too).
END_OF_LIFE_ANSWER = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more "
    "details."
)
LEGACY_SINCE = datetime(2026, 3, 30, tzinfo=UTC)
EXTENDED_FROM = datetime(2026, 6, 30, tzinfo=UTC)
END_OF_LIFE_AT = datetime(2026, 9, 30, tzinfo=UTC)


def foundation_model(model: str, status: str = "ACTIVE", region: str = "us-east-1") -> dict[str, Any]:
    """A GetFoundationModel answer as documented; a Legacy model carries its dates."""
    lifecycle: dict[str, Any] = {"status": status, "startOfLifeTime": datetime(2024, 12, 3, tzinfo=UTC)}
    if status == "LEGACY":
        lifecycle |= {
            "legacyTime": LEGACY_SINCE,
            "publicExtendedAccessTime": EXTENDED_FROM,
            "endOfLifeTime": END_OF_LIFE_AT,
        }
    return {
        "modelDetails": {
            "modelArn": f"arn:aws:bedrock:{region}::foundation-model/{model}",
            "modelId": model,
            "modelName": model,
            "providerName": "Amazon",
            "inputModalities": ["TEXT"],
            "outputModalities": ["TEXT"],
            "modelLifecycle": lifecycle,
        }
    }


def add_lifecycle(stub: Stubber, model: str, answer: str, region: str = "us-east-1") -> None:
    """Stub one GetFoundationModel of `model`: ACTIVE / LEGACY, or END_OF_LIFE / NOT_FOUND / DENIED
    answered with AWS's error."""
    params = {"modelIdentifier": model}
    if answer == "END_OF_LIFE":
        stub.add_client_error(
            "get_foundation_model",
            "ResourceNotFoundException",
            END_OF_LIFE_ANSWER,
            404,
            expected_params=params,
        )
    elif answer == "NOT_FOUND":
        message = "The specified model identifier does not exist."
        stub.add_client_error(
            "get_foundation_model", "ResourceNotFoundException", message, 404, expected_params=params
        )
    elif answer == "DENIED":
        message = "User is not authorized to perform: bedrock:GetFoundationModel"
        stub.add_client_error(
            "get_foundation_model", "AccessDeniedException", message, 403, expected_params=params
        )
    else:
        stub.add_response("get_foundation_model", foundation_model(model, answer, region), params)


def _plans(**values: Any) -> tuple[KindPlan, ...]:
    return parse_provider_plan(
        stage="dev",
        kinds=("summary", "embedding", "image-generate", "tts-generate", "report"),
        default_provider="bedrock",
        inherit={"report": "summary"},
        **values,
    )


def test_the_models_of_a_stage_are_every_kinds_default_allowed_and_fallback_bedrock_models() -> None:
    plans = _plans(
        kind_providers="embedding=openai",
        kind_models="summary=us.amazon.nova-lite-v1:0;classify=global.amazon.nova-lite-v1:0",
        kind_allowed_models="summary=us.amazon.nova-pro-v1:0,amazon.nova-lite-v1:0",
    )
    assert bedrock_models(plans) == {
        # Inference profiles (us., global.) resolve to the model they route to.
        "amazon.nova-lite-v1:0": ("classify", "report", "summary"),
        # summary's allowed model, and its declared fallback (aijobs/kinds/summary.py).
        "amazon.nova-pro-v1:0": ("report", "summary"),
        # image-generate's default and allowed models (aijobs/kinds/image_generate.py).
        "stability.sd3-5-large-v1:0": ("image-generate",),
        "stability.stable-image-core-v1:1": ("image-generate",),
        "stability.stable-image-ultra-v1:1": ("image-generate",),
    }  # speech (Polly) and embedding (OpenAI) call no Bedrock model


def test_a_fallback_on_bedrock_counts_even_for_a_kind_on_another_provider() -> None:
    plans = _plans(kind_providers="summary=openai", kind_fallbacks="summary=bedrock:us.amazon.nova-pro-v1:0")
    assert bedrock_models(plans)["amazon.nova-pro-v1:0"] == ("report", "summary")


def test_a_stage_without_bedrock_has_no_model_to_check() -> None:
    assert (
        bedrock_models(parse_provider_plan(stage="local", kinds=("summary",), default_provider="local")) == {}
    )


@pytest.fixture
def bedrock() -> Any:
    return boto3.client("bedrock", region_name="us-east-1")


def test_an_active_model_is_alive(bedrock: Any) -> None:
    with Stubber(bedrock) as stub:
        add_lifecycle(stub, "amazon.nova-lite-v1:0", "ACTIVE")
        check = check_model(bedrock, "amazon.nova-lite-v1:0", ("summary",))
    assert (check.model, check.region, check.status, check.kinds) == (
        "amazon.nova-lite-v1:0", "us-east-1", ACTIVE, ("summary",),
    )  # fmt: skip
    assert check.alive
    assert (check.legacy_at, check.end_of_life_at) == (None, None)


def test_a_legacy_model_reports_its_dates(bedrock: Any) -> None:
    with Stubber(bedrock) as stub:
        add_lifecycle(stub, "amazon.nova-canvas-v1:0", "LEGACY")
        check = check_model(bedrock, "amazon.nova-canvas-v1:0")
    assert check.status == LEGACY
    assert not check.alive
    assert (check.legacy_at, check.extended_access_at, check.end_of_life_at) == (
        LEGACY_SINCE, EXTENDED_FROM, END_OF_LIFE_AT,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "status", "detail"),
    [
        # After its end of life, GetFoundationModel itself fails with the end-of-life answer.
        ("END_OF_LIFE", END_OF_LIFE, END_OF_LIFE_ANSWER),
        ("NOT_FOUND", NOT_FOUND, "does not exist"),
        ("DENIED", UNKNOWN, "not authorized"),
    ],
)
def test_a_model_whose_lifecycle_cannot_be_read(bedrock: Any, answer: str, status: str, detail: str) -> None:
    with Stubber(bedrock) as stub:
        add_lifecycle(stub, "amazon.nova-reel-v1:0", answer)
        check = check_model(bedrock, "amazon.nova-reel-v1:0", ("video-generate",))
    assert check.status == status
    assert not check.alive
    assert detail in check.detail


def test_every_model_is_checked_in_every_region() -> None:
    east = boto3.client("bedrock", region_name="us-east-1")
    west = boto3.client("bedrock", region_name="us-west-2")
    with Stubber(east) as east_stub, Stubber(west) as west_stub:
        add_lifecycle(east_stub, "amazon.nova-lite-v1:0", "ACTIVE")
        add_lifecycle(west_stub, "amazon.nova-lite-v1:0", "LEGACY", region="us-west-2")
        add_lifecycle(east_stub, "amazon.nova-reel-v1:0", "END_OF_LIFE")
        add_lifecycle(west_stub, "amazon.nova-reel-v1:0", "END_OF_LIFE")
        checks = check_models(
            {"amazon.nova-lite-v1:0": ("summary",), "amazon.nova-reel-v1:0": ("video-generate",)},
            [east, west],
        )
        east_stub.assert_no_pending_responses()
        west_stub.assert_no_pending_responses()
    assert [(c.model, c.region, c.status) for c in checks] == [
        ("amazon.nova-lite-v1:0", "us-east-1", ACTIVE),
        ("amazon.nova-lite-v1:0", "us-west-2", LEGACY),
        ("amazon.nova-reel-v1:0", "us-east-1", END_OF_LIFE),
        ("amazon.nova-reel-v1:0", "us-west-2", END_OF_LIFE),
    ]
