"""The model price table (aijobs.pricing): every unit type, inference profiles, unknown models."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aijobs import observability, pricing
from aijobs.pricing import ModelPrice, ModelPriceTable, Spend, base_model_id, cost, default_table, spend
from aijobs_cli.sizing.cost import Workload, estimate, render_text

M = 1_000_000
LITE = "amazon.nova-lite-v1:0"


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    pricing._warned.clear()


# --- every unit type, from the shipped table -----------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "usage", "expected"),
    [
        # tokens in / out (Bedrock Converse keys)
        ("bedrock", "amazon.nova-micro-v1:0", {"inputTokens": M, "outputTokens": M}, 0.035 + 0.14),
        ("bedrock", "amazon.nova-lite-v1:0", {"inputTokens": 2000, "outputTokens": 500}, 0.00024),
        ("bedrock", "amazon.nova-pro-v1:0", {"inputTokens": 1000, "outputTokens": 1000}, 0.004),
        ("bedrock", "amazon.nova-lite-v1:0", {"inputTokens": 0, "outputTokens": 0}, 0.0),
        # tokens in only (embeddings; `texts` is not a billed unit)
        ("bedrock", "amazon.titan-embed-text-v2:0", {"inputTokens": 5000, "texts": 3}, 0.0001),
        ("bedrock", "amazon.titan-embed-text-v2:0", {"inputTextTokenCount": M}, 0.02),
        # tokens in / out (OpenAI keys; total_tokens is never counted twice)
        (
            "openai",
            "gpt-4o-mini",
            {"prompt_tokens": 1000, "completion_tokens": 1000, "total_tokens": 2000},
            0.00075,
        ),
        ("openai", "text-embedding-3-small", {"prompt_tokens": M, "total_tokens": M}, 0.02),
        # per second of video
        ("bedrock", "luma.ray-v2:0", {"videoSeconds": 5}, 7.5),
        # per character of speech, by engine (model ids are polly-<engine>-<voice>)
        ("polly", "polly-standard-Joanna", {"characters": M}, 4.0),
        ("polly", "polly-neural-Matthew", {"characters": 3000}, 0.048),
        ("polly", "polly-long-form-Danielle", {"characters": 1000}, 0.1),
        ("polly", "polly-generative-Ruth", {"characters": 1000}, 0.03),
        # per image, default size and quality
        ("bedrock", "stability.stable-image-core-v1:1", {"images": 1}, 0.04),
        ("bedrock", "stability.stable-image-ultra-v1:1", {"images": 2}, 0.28),
        ("openai", "dall-e-3", {"images": 2}, 0.08),
        # the local provider's models are free, whatever they report
        ("local", "local-text-1", {"inputTokens": 120, "outputTokens": 30}, 0.0),
        ("local", "local-tts-1", {}, 0.0),
    ],
)
def test_usage_is_priced_per_unit(provider: str, model: str, usage: dict[str, int], expected: float) -> None:
    assert cost(provider, model, usage) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("model", "options", "images", "expected"),
    [
        ("amazon.nova-canvas-v1:0", {"width": 1024, "height": 1024}, 1, 0.04),
        ("amazon.nova-canvas-v1:0", {"width": 1280, "height": 720}, 2, 0.08),
        ("amazon.nova-canvas-v1:0", {"width": 2048, "height": 2048}, 3, 0.18),
        ("amazon.nova-canvas-v1:0", {"width": 1024, "height": 1024, "quality": "premium"}, 1, 0.06),
        ("amazon.nova-canvas-v1:0", {"width": 2048, "height": 1024, "quality": "premium"}, 1, 0.08),
        # An unknown quality prices as the default (first) one.
        ("amazon.nova-canvas-v1:0", {"quality": "ultra"}, 1, 0.04),
    ],
)
def test_images_are_priced_by_size_and_quality(
    model: str, options: dict[str, Any], images: int, expected: float
) -> None:
    # A model priced in tiers of size and quality (as Nova Canvas was, until its end of life).
    table = ModelPriceTable.model_validate(
        {
            "models": [
                {
                    "provider": "bedrock",
                    "model": model,
                    "per_image": [
                        {"quality": "standard", "max_pixels": 1048576, "usd": 0.04},
                        {"quality": "standard", "max_pixels": 4194304, "usd": 0.06},
                        {"quality": "premium", "max_pixels": 1048576, "usd": 0.06},
                        {"quality": "premium", "max_pixels": 4194304, "usd": 0.08},
                    ],
                    "as_of": "2025-11-01",
                    "source": "https://example.com/tiers",
                }
            ]
        }
    )
    assert cost("bedrock", model, {"images": images}, options=options, table=table) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("options", "images", "expected"),
    [
        ({"size": "1024x1024"}, 1, 0.04),
        ({"size": "1024x1792"}, 2, 0.16),
        ({"size": "1792x1024", "quality": "hd"}, 1, 0.12),
        ({"size": "1024x1024", "quality": "hd"}, 4, 0.32),
        # Larger than every tier: the largest tier's price.
        ({"size": "4096x4096"}, 1, 0.08),
        ({"size": "not-a-size"}, 1, 0.04),
    ],
)
def test_openai_images_are_priced_by_size_and_quality(
    options: dict[str, Any], images: int, expected: float
) -> None:
    usage = {"images": images}
    assert cost("openai", "dall-e-3", usage, options=options) == pytest.approx(expected)


def test_costs_carry_no_binary_float_noise() -> None:
    # 0.1 + 0.2 style noise would show up in the stored string.
    usd = cost("bedrock", "amazon.nova-micro-v1:0", {"inputTokens": 3, "outputTokens": 7})
    assert usd is not None
    assert str(usd) == "1.085e-06"


# --- model ids that price like another ---------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "base"),
    [
        ("us.amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0"),
        ("eu.amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0"),
        ("apac.amazon.nova-micro-v1:0", "amazon.nova-micro-v1:0"),
        ("us-gov.amazon.nova-pro-v1:0", "amazon.nova-pro-v1:0"),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.amazon.nova-pro-v1:0",
            "amazon.nova-pro-v1:0",
        ),
        ("arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-reel-v1:0", "amazon.nova-reel-v1:0"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0"),
        # A vendor id alone is not a profile prefix.
        ("us.titan", "us.titan"),
    ],
)
def test_base_model_ids(model: str, base: str) -> None:
    assert base_model_id(model) == base


NOVA_TOKENS = {"inputTokens": 900, "outputTokens": 90}


@pytest.mark.parametrize(
    ("provider", "profile", "base", "usage"),
    [
        ("bedrock", "us.amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0", NOVA_TOKENS),
        ("bedrock", "eu.amazon.nova-lite-v1:0", "amazon.nova-lite-v1:0", NOVA_TOKENS),
        ("bedrock", "apac.amazon.nova-pro-v1:0", "amazon.nova-pro-v1:0", NOVA_TOKENS),
        ("bedrock", "us.amazon.nova-micro-v1:0", "amazon.nova-micro-v1:0", NOVA_TOKENS),
        ("openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini", {"prompt_tokens": 50, "completion_tokens": 9}),
    ],
)
def test_profile_and_snapshot_ids_price_like_the_base_model(
    provider: str, profile: str, base: str, usage: dict[str, int]
) -> None:
    priced = cost(provider, profile, usage)
    assert priced is not None
    assert priced > 0
    assert priced == cost(provider, base, usage)


def test_an_exact_entry_wins_over_its_base_model() -> None:
    table = ModelPriceTable(
        models=(
            _entry("openai", "gpt-4o-mini", input_per_million_tokens=1.0),
            _entry("openai", "gpt-4o-mini-2024-07-18", input_per_million_tokens=2.0),
        )
    )
    usage = {"prompt_tokens": M}
    assert cost("openai", "gpt-4o-mini-2024-07-18", usage, table=table) == 2.0
    assert cost("openai", "gpt-4o-mini-2099-01-01", usage, table=table) == 1.0


# --- what the table cannot price ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "usage"),
    [
        ("bedrock", "anthropic.claude-3-haiku-20240307-v1:0", {"inputTokens": 10, "outputTokens": 1}),
        ("bedrock", "amazon.nova-lite-v2:0", {"inputTokens": 10}),
        # The same model id through another provider (a gateway, another price): not priced.
        ("bedrock", "gpt-4o-mini", {"prompt_tokens": 10}),
        ("openrouter", "gpt-4o-mini", {"prompt_tokens": 10}),
        ("openai", "polly-neural-Joanna", {"characters": 10}),
        ("polly", "polly-neuralx-Joanna", {"characters": 10}),
        ("bedrock", "xx.amazon.nova-lite-v1:0", {"inputTokens": 10}),
        ("bedrock", None, {"inputTokens": 10}),
        ("bedrock", "", {"inputTokens": 10}),
        # A known model, but usage without any unit it is billed by.
        ("bedrock", "amazon.nova-lite-v1:0", {"images": 1}),
        ("bedrock", "luma.ray-v2:0", {}),
    ],
)
def test_unknown_models_cost_none(provider: str, model: str | None, usage: dict[str, int]) -> None:
    assert cost(provider, model, usage) is None


def test_an_unknown_model_is_logged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    warnings: list[tuple[str, Any]] = []

    def warning(message: str, *, extra: dict[str, Any]) -> None:
        warnings.append((message, extra["model"]))

    monkeypatch.setattr(observability.logger, "warning", warning)
    for _ in range(3):
        assert cost("bedrock", "mystery.model-v9", {"inputTokens": 1}) is None
    assert cost("bedrock", "other.model-v1", {"inputTokens": 1}) is None
    assert cost("bedrock", "amazon.nova-lite-v1:0", {"images": 1}) is None
    assert cost("bedrock", "amazon.nova-lite-v1:0", {"images": 2}) is None
    assert warnings == [
        ("model not in the price table (model_prices.json): job cost unknown", "mystery.model-v9"),
        ("model not in the price table (model_prices.json): job cost unknown", "other.model-v1"),
        ("usage has no unit this model is priced by: job cost unknown", "amazon.nova-lite-v1:0"),
    ]


# --- spend: what the consumer stores and emits --------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "usage", "given", "expected"),
    [
        # The adapter's own cost wins, even over the table.
        ("local", "local-text-1", {"inputTokens": 1}, 0.0, Spend(0.0, "local")),
        ("bedrock", "amazon.nova-lite-v1:0", {"inputTokens": M}, 1.5, Spend(1.5, "amazon.nova-lite-v1:0")),
        ("bedrock", "custom.model-v1", {}, 0.25, Spend(0.25, "custom.model-v1")),
        # Else the table; the dimension is the table's model (bounded cardinality).
        ("bedrock", "us." + LITE, {"inputTokens": M}, None, Spend(0.06, LITE)),
        ("polly", "polly-neural-Joanna", {"characters": M}, None, Spend(16.0, "polly-neural")),
        ("openai", "gpt-4o-mini-2024-07-18", {"prompt_tokens": M}, None, Spend(0.15, "gpt-4o-mini")),
        ("bedrock", "mystery.model-v9", {"inputTokens": 1}, None, Spend(None, "mystery.model-v9")),
        ("polly", None, {"characters": 10}, None, Spend(None, "unknown")),
    ],
)  # fmt: skip
def test_spend(
    provider: str, model: str | None, usage: dict[str, int], given: float | None, expected: Spend
) -> None:
    assert spend(provider, model, usage, given=given) == expected


def test_spend_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> ModelPriceTable:
        raise ValueError("model_prices.json is not valid JSON")

    monkeypatch.setattr(pricing, "default_table", broken)
    assert spend("bedrock", "amazon.nova-lite-v1:0", {"inputTokens": 1}) == Spend(
        None, "amazon.nova-lite-v1:0"
    )
    assert spend("local", "local-text-1", {}, given=0.0) == Spend(0.0, "local-text-1")


def test_the_dimension_is_bounded_in_length() -> None:
    assert len(spend("openai", "x" * 500, {}).model) == 100


# --- the shipped table --------------------------------------------------------------------------


REQUIRED = {
    ("bedrock", "amazon.nova-micro-v1:0"),
    ("bedrock", "amazon.nova-lite-v1:0"),
    ("bedrock", "amazon.nova-pro-v1:0"),
    ("bedrock", "amazon.titan-embed-text-v2:0"),
    ("bedrock", "stability.stable-image-core-v1:1"),
    ("bedrock", "luma.ray-v2:0"),
    ("polly", "polly-standard"),
    ("polly", "polly-neural"),
    ("openai", "gpt-4o-mini"),
    ("openai", "text-embedding-3-small"),
    ("openai", "dall-e-3"),
    ("local", "local"),
}


def test_the_shipped_table_prices_every_default_model() -> None:
    table = default_table()
    assert {(entry.provider, entry.model) for entry in table.models} >= REQUIRED
    for entry in table.models:
        assert entry.as_of <= date.today()
        assert entry.source.strip()
        assert entry.provider == "local" or entry.source.startswith("https://")


def test_every_model_a_declared_kind_may_call_is_priced() -> None:
    from aijobs.kinds.registry import declared, require
    from aijobs.provider_plan import split_model_ref

    table = default_table()
    for name in declared():
        kind = require(name)
        models = [(provider, model) for provider, model in kind.models.items() if model]
        models += [(provider, model) for provider, ids in kind.allowed_models.items() for model in ids]
        models += [split_model_ref(ref) for refs in kind.fallbacks.values() for ref in refs]
        for provider, model in models:
            assert table.lookup(provider, model) is not None, (name, provider, model)


def test_the_table_file_ships_inside_the_layer_package() -> None:
    path = Path(pricing.__file__).with_name(pricing.PRICE_FILE)
    assert path.is_file()
    assert "layers/aijobs/python/aijobs" in path.as_posix()
    assert ModelPriceTable.from_json(path) == default_table()


def test_the_table_round_trips_through_json(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(default_table().to_json(), encoding="utf-8")
    assert ModelPriceTable.from_json(path) == default_table()


# --- table validation ---------------------------------------------------------------------------


def _entry(provider: str, model: str, **prices: Any) -> ModelPrice:
    return ModelPrice.model_validate(
        {"provider": provider, "model": model, "as_of": "2025-11-01", "source": "test", **prices}
    )


@pytest.mark.parametrize(
    "prices",
    [
        {},  # neither prices nor free: a typo must not make a model cost 0
        {"free": True, "per_second": 0.1},
        {"per_second": -0.1},
        {"per_sekond": 0.1},
        {"per_image": [{"quality": "standard", "max_pixels": 0, "usd": 0.04}]},
        {"per_second": 0.1, "match": "glob"},
    ],
)
def test_invalid_entries_are_rejected(prices: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _entry("bedrock", "some.model", **prices)


def test_an_entry_needs_its_date_and_source() -> None:
    with pytest.raises(ValidationError):
        ModelPrice.model_validate({"provider": "bedrock", "model": "m", "per_second": 1.0})


def test_a_model_listed_twice_is_rejected() -> None:
    with pytest.raises(ValidationError):
        ModelPriceTable(
            models=(_entry("bedrock", "m", per_second=1.0), _entry("bedrock", "m", per_second=2.0))
        )


def test_the_longest_prefix_wins() -> None:
    table = ModelPriceTable(
        models=(
            _entry("polly", "polly", match="prefix", per_million_characters=1.0),
            _entry("polly", "polly-neural", match="prefix", per_million_characters=2.0),
        )
    )
    assert cost("polly", "polly-neural-Joanna", {"characters": M}, table=table) == 2.0
    assert cost("polly", "polly-standard-Joanna", {"characters": M}, table=table) == 1.0
    assert cost("polly", "pollyx", {"characters": M}, table=table) is None


# --- `aijobs cost`: the model line comes from the same table ------------------------------------


def _workload(**model: Any) -> Workload:
    return Workload(jobs_per_month=20_000, retry_rate=0.05, dlq_rate=0.01, **model)


def test_the_cost_model_line_prices_succeeded_jobs_from_the_table() -> None:
    usage = {"inputTokens": 2000, "outputTokens": 300}
    est = estimate(_workload(model="us.amazon.nova-lite-v1:0", model_usage_per_job=usage))
    lines = [line for line in est.lines if line.service == "Model"]
    assert [(line.item, line.quantity, line.unit_price, line.price_basis) for line in lines] == [
        ("us.amazon.nova-lite-v1:0 input tokens", 19_800 * 2000, 0.06, M),
        ("us.amazon.nova-lite-v1:0 output tokens", 19_800 * 300, 0.24, M),
    ]
    per_job = cost("bedrock", "us.amazon.nova-lite-v1:0", usage)
    assert per_job is not None
    assert est.by_service()["Model"] == pytest.approx(19_800 * per_job)
    assert "as of 2025-11-01" in lines[0].how
    text = render_text(est)
    assert "us.amazon.nova-lite-v1:0 output tokens" in text
    assert lines[1].how in text


def test_the_cost_model_line_knows_every_unit() -> None:
    images = _workload(
        model="dall-e-3",
        model_provider="openai",
        model_usage_per_job={"images": 1},
        model_options={"size": "1024x1792", "quality": "hd"},
    )
    (line,) = [line for line in estimate(images).lines if line.service == "Model"]
    assert (line.quantity, line.unit) == (19_800, "images")
    assert line.monthly_usd == pytest.approx(19_800 * 0.12)
    speech = _workload(
        model="polly-neural-Joanna", model_provider="polly", model_usage_per_job={"characters": 1500}
    )
    assert estimate(speech).by_service()["Model"] == pytest.approx(19_800 * 1500 * 16 / M)
    video = _workload(model="luma.ray-v2:0", model_usage_per_job={"videoSeconds": 5})
    assert estimate(video).by_service()["Model"] == pytest.approx(19_800 * 5 * 1.5)
    local = _workload(model="local-text-1", model_provider="local")
    assert estimate(local).by_service()["Model"] == 0.0


def test_the_cost_model_line_is_optional_and_refuses_what_it_cannot_price() -> None:
    assert "Model" not in estimate(_workload()).by_service()
    with pytest.raises(ValueError, match="not in the model price table"):
        estimate(_workload(model="mystery.model-v9", model_usage_per_job={"inputTokens": 1}))
    with pytest.raises(ValueError, match="none of the units"):
        estimate(_workload(model="amazon.nova-lite-v1:0", model_usage_per_job={"images": 1}))
    with pytest.raises(ValidationError):
        _workload(model="amazon.nova-lite-v1:0", model_usage_per_job={"inputTokens": -1})
