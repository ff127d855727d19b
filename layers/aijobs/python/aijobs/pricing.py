"""Model spend: a job's usage (tokens, images, seconds of video, characters) priced in USD.

The prices live in `model_prices.json` next to this module (shipped in the layer): one entry per
provider and model with its list prices, the date they were read (`as_of`) and where (`source`).
`cost(provider, model, usage)` turns an adapter's `usage` into dollars; a model the table does not
know has no cost (None, and one warning per model), never an error that could fail a job. The
consumer stores the cost on the row and emits it as the `ModelSpend` metric; `aijobs cost` prices
its model line from the same table.

Usage keys are the adapters' own: Bedrock's `inputTokens`/`outputTokens`, OpenAI's
`prompt_tokens`/`completion_tokens`, `images`, `videoSeconds`, `characters` (see `*_KEYS`).
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aijobs.observability import logger

PRICE_FILE = "model_prices.json"
MILLION = 1_000_000

# The usage keys each unit is read from, in order; the first one present counts (an adapter uses
# one naming, and `total_tokens` is never priced: it would count the input twice).
INPUT_TOKEN_KEYS = ("inputTokens", "prompt_tokens", "input_tokens", "inputTextTokenCount")
OUTPUT_TOKEN_KEYS = ("outputTokens", "completion_tokens", "output_tokens")
CHARACTER_KEYS = ("characters",)
VIDEO_SECOND_KEYS = ("videoSeconds",)
IMAGE_KEYS = ("images",)

# Bedrock cross-region inference profiles (`us.amazon.nova-lite-v1:0`) bill like the base model.
_PROFILE_PREFIX = re.compile(r"^(?:us|us-gov|eu|apac|jp|au|ca|global)\.(?=[a-z0-9-]+\.)")
# OpenAI answers with the dated snapshot it resolved an alias to (`gpt-4o-mini-2024-07-18`).
_SNAPSHOT_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}$")
# Dimension values stay short (a model id from a gateway could be anything).
_MAX_DIMENSION = 100


class ImageTier(BaseModel):
    """The price of one image of `quality` with at most `max_pixels` (width x height)."""

    # The price models build their validators when the table is first read (`defer_build`).
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    quality: str = Field(min_length=1)
    max_pixels: int = Field(gt=0)
    usd: float = Field(ge=0)


@dataclass(frozen=True)
class UnitPrice:
    """One billed unit of a model: `usd` per `basis` units, read from the first of `keys` in usage."""

    unit: str
    keys: tuple[str, ...]
    usd: float
    basis: int
    note: str = ""


class ModelPrice(BaseModel):
    """The list prices of one model of one provider (an entry of `model_prices.json`)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    provider: str = Field(min_length=1)
    model: str = Field(min_length=1)
    match: Literal["exact", "prefix"] = "exact"
    input_per_million_tokens: float | None = Field(default=None, ge=0)
    output_per_million_tokens: float | None = Field(default=None, ge=0)
    per_million_characters: float | None = Field(default=None, ge=0)
    per_second: float | None = Field(default=None, ge=0)
    # Tiers by quality and size; the first tier's quality is the default one.
    per_image: tuple[ImageTier, ...] = ()
    free: bool = False
    as_of: date
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _priced_or_free(self) -> Self:
        priced = any(
            value is not None
            for value in (
                self.input_per_million_tokens,
                self.output_per_million_tokens,
                self.per_million_characters,
                self.per_second,
            )
        ) or bool(self.per_image)
        if priced == self.free:
            # An entry without prices must say it is free: a typo must not make a model cost 0.
            raise ValueError(
                f"{self.provider}/{self.model}: give prices or free=true (not both, not neither)"
            )
        return self

    def matches(self, model: str) -> bool:
        if self.match == "prefix":
            return model == self.model or model.startswith(self.model + "-")
        return model == self.model

    def image_tier(self, options: Mapping[str, Any] | None = None) -> ImageTier | None:
        """The tier of one image of the job's size (`width`/`height` or `size` "WxH") and `quality`
        options: the smallest tier of that quality the size fits in (the largest if none does). No
        size means the smallest tier, which is the adapters' default 1024x1024."""
        if not self.per_image:
            return None
        options = options or {}
        quality = options.get("quality")
        tiers = [tier for tier in self.per_image if tier.quality == quality] or [
            tier for tier in self.per_image if tier.quality == self.per_image[0].quality
        ]
        tiers.sort(key=lambda tier: tier.max_pixels)
        pixels = _pixels(options)
        if pixels is None:
            return tiers[0]
        return next((tier for tier in tiers if pixels <= tier.max_pixels), tiers[-1])

    def unit_prices(self, options: Mapping[str, Any] | None = None) -> tuple[UnitPrice, ...]:
        """The billed units of this model (for a job with `options`), in a fixed order."""
        units: list[UnitPrice] = []
        if self.input_per_million_tokens is not None:
            units.append(UnitPrice("input tokens", INPUT_TOKEN_KEYS, self.input_per_million_tokens, MILLION))
        if self.output_per_million_tokens is not None:
            units.append(
                UnitPrice("output tokens", OUTPUT_TOKEN_KEYS, self.output_per_million_tokens, MILLION)
            )
        if self.per_million_characters is not None:
            units.append(UnitPrice("characters", CHARACTER_KEYS, self.per_million_characters, MILLION))
        if self.per_second is not None:
            units.append(UnitPrice("seconds of video", VIDEO_SECOND_KEYS, self.per_second, 1))
        tier = self.image_tier(options)
        if tier is not None:
            note = f"{tier.quality}, up to {tier.max_pixels:,} pixels"
            units.append(UnitPrice("images", IMAGE_KEYS, tier.usd, 1, note))
        return tuple(units)

    def price(
        self, usage: Mapping[str, int | float], options: Mapping[str, Any] | None = None
    ) -> float | None:
        """USD for `usage`; None if the usage has none of the units this model is billed by."""
        if self.free:
            return 0.0
        pixels = usage.get("imagePixels")
        if isinstance(pixels, int) and not isinstance(pixels, bool) and pixels > 0:
            # The size each image was made at, as the adapter reports it, picks the tier.
            options = {**(options or {}), "pixels": pixels}
        total, counted = Decimal(0), False
        for unit in self.unit_prices(options):
            quantity = _quantity(usage, unit.keys)
            if quantity is None:
                continue
            counted = True
            total += Decimal(str(unit.usd)) * Decimal(str(quantity)) / unit.basis
        # Rounded to 1e-10 USD so the stored value carries no binary float noise.
        return float(round(total, 10)) if counted else None


class ModelPriceTable(BaseModel):
    """Every priced model (the whole `model_prices.json`)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    about: tuple[str, ...] = ()
    models: tuple[ModelPrice, ...]

    @model_validator(mode="after")
    def _unique(self) -> Self:
        seen: set[tuple[str, str]] = set()
        for entry in self.models:
            key = (entry.provider, entry.model)
            if key in seen:
                raise ValueError(f"{entry.provider}/{entry.model} is listed twice")
            seen.add(key)
        return self

    @classmethod
    def from_json(cls, path: str | Path) -> Self:
        return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))

    def to_json(self) -> str:
        return self.model_dump_json(indent=2, exclude_defaults=True) + "\n"

    def lookup(self, provider: str, model: str) -> ModelPrice | None:
        """The entry pricing `model` of `provider`: the id itself, then its base model id (see
        `base_model_id`); exact entries before prefix entries, the longest prefix first."""
        entries = [entry for entry in self.models if entry.provider == provider]
        for candidate in dict.fromkeys((model, base_model_id(model))):
            exact = next((e for e in entries if e.match == "exact" and e.matches(candidate)), None)
            if exact is not None:
                return exact
            prefixes = sorted(
                (e for e in entries if e.match == "prefix" and e.matches(candidate)),
                key=lambda e: len(e.model),
                reverse=True,
            )
            if prefixes:
                return prefixes[0]
        return None


@functools.cache
def default_table() -> ModelPriceTable:
    """The table shipped with the package, read on first use (never at import)."""
    text = resources.files("aijobs").joinpath(PRICE_FILE).read_text(encoding="utf-8")
    return ModelPriceTable.model_validate_json(text)


def base_model_id(model: str) -> str:
    """The id a model is priced under: a Bedrock ARN's last part without its cross-region profile
    prefix (`us.`, `eu.`, `apac.`, ...), or an OpenAI id without its snapshot date."""
    if model.startswith("arn:"):
        model = model.rsplit("/", 1)[-1]
    model = _PROFILE_PREFIX.sub("", model, count=1)
    return _SNAPSHOT_SUFFIX.sub("", model)


_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


def _warn_once(message: str, provider: str, model: str) -> None:
    with _warned_lock:
        if (provider, model) in _warned:
            return
        _warned.add((provider, model))
    logger.warning(message, extra={"provider": provider, "model": model[:_MAX_DIMENSION]})


def cost(
    provider: str,
    model: str | None,
    usage: Mapping[str, int | float],
    *,
    options: Mapping[str, Any] | None = None,
    table: ModelPriceTable | None = None,
) -> float | None:
    """USD for `usage` of `model` on `provider`, or None if the table cannot price it.

    `options` are the job's options (image size and quality pick the per-image tier). A model that
    is not in the table, or usage without any unit the model is billed by, is logged once per model
    and priced None.
    """
    if not model:
        _warn_once("no model on the result: job cost unknown", provider, "")
        return None
    entry = (table or default_table()).lookup(provider, model)
    if entry is None:
        _warn_once("model not in the price table (model_prices.json): job cost unknown", provider, model)
        return None
    usd = entry.price(usage, options)
    if usd is None:
        _warn_once("usage has no unit this model is priced by: job cost unknown", provider, model)
    return usd


@dataclass(frozen=True)
class Spend:
    """What a finished job cost (`usd`, None if unknown) and the `model` dimension of its metric."""

    usd: float | None
    model: str


def spend(
    provider: str,
    model: str | None,
    usage: Mapping[str, int | float],
    *,
    given: float | None = None,
    options: Mapping[str, Any] | None = None,
    table: ModelPriceTable | None = None,
) -> Spend:
    """The spend of a succeeded job: the adapter's own cost (`given`) if it set one, else `cost`.

    Never raises (a broken price table must not fail a job that already succeeded). The metric's
    model dimension is the price-table entry's model (`amazon.nova-lite-v1:0` for a `us.` profile,
    `polly-neural` for every neural voice), so its cardinality stays that of the table; a model the
    table does not know keeps its own id.
    """
    try:
        usd = given if given is not None else cost(provider, model, usage, options=options, table=table)
        entry = (table or default_table()).lookup(provider, model) if model else None
    except Exception:
        logger.exception("pricing failed: job cost unknown", extra={"provider": provider})
        return Spend(usd=given, model=(model or "unknown")[:_MAX_DIMENSION])
    dimension = entry.model if entry is not None else (model or "unknown")
    return Spend(usd=usd, model=dimension[:_MAX_DIMENSION])


def _quantity(usage: Mapping[str, int | float], keys: tuple[str, ...]) -> int | float | None:
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _pixels(options: Mapping[str, Any]) -> int | None:
    pixels = options.get("pixels")
    if isinstance(pixels, int) and not isinstance(pixels, bool) and pixels > 0:
        return pixels
    width, height = options.get("width"), options.get("height")
    size = options.get("size")
    if isinstance(size, str) and "x" in size:
        raw_width, _, raw_height = size.partition("x")
        if raw_width.isdigit() and raw_height.isdigit():
            width, height = int(raw_width), int(raw_height)
    if isinstance(width, bool) or isinstance(height, bool):
        return None
    if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
        return width * height
    return None
