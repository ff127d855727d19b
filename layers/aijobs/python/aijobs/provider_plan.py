"""Which provider and model serve each job kind on a stage: parsed and validated at synth time.

Stage keys (`.env.<stage>` or CDK context):

- `PROVIDER`: the stage's default provider (`local` on the local stage, `bedrock` elsewhere);
- `KIND_PROVIDERS=summary=bedrock;tts-generate=polly;embedding=openai`: per-kind overrides;
- `KIND_MODELS=summary=amazon.nova-lite-v1:0;classify=...`: per-kind models (model ids contain
  `:`, hence `=`); kinds not listed use the provider's default model;
- `KIND_ALLOWED_MODELS=summary=amazon.nova-lite-v1:0,amazon.nova-pro-v1:0`: what a job's `model`
  field may choose besides the default (anything else is a 422 at submit).

`classify` is the synchronous short-task path's pseudo-kind. This module is data and parsing
only (no AWS, no provider imports), so the CDK app and every function can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PROVIDERS = ("local", "bedrock", "polly", "openai")
CLASSIFY = "classify"

# What each provider can run.
CAPABILITIES: Mapping[str, frozenset[str]] = {
    "local": frozenset(
        {
            "summary",
            "embedding",
            "image-generate",
            "image-caption",
            "tts-generate",
            "video-generate",
            CLASSIFY,
        }
    ),
    "bedrock": frozenset(
        {"summary", "embedding", "image-generate", "image-caption", "video-generate", CLASSIFY}
    ),
    "polly": frozenset({"tts-generate"}),
    "openai": frozenset({"summary", "embedding", "image-generate", "image-caption", CLASSIFY}),
}
SHIPPED_KINDS = frozenset().union(*CAPABILITIES.values())
# Defaults a stage may rely on (verify model access in the Bedrock console; see README).
DEFAULT_MODELS: Mapping[str, Mapping[str, str]] = {
    "bedrock": {
        "summary": "us.amazon.nova-lite-v1:0",
        CLASSIFY: "us.amazon.nova-micro-v1:0",
        "image-caption": "us.amazon.nova-lite-v1:0",
        "embedding": "amazon.titan-embed-text-v2:0",
        "image-generate": "amazon.nova-canvas-v1:0",
        "video-generate": "amazon.nova-reel-v1:0",
    },
    "openai": {
        "summary": "gpt-4o-mini",
        CLASSIFY: "gpt-4o-mini",
        "image-caption": "gpt-4o-mini",
        "embedding": "text-embedding-3-small",
        "image-generate": "dall-e-3",
    },
}
# A kind the default provider cannot run goes to this one unless KIND_PROVIDERS says otherwise.
FALLBACK_PROVIDERS: Mapping[str, str] = {"tts-generate": "polly"}
# Cross-region inference profile prefixes (`us.amazon.nova-lite-v1:0`).
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "us-gov.", "ca.", "jp.", "au.", "global.")

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}")


class ProviderPlanError(ValueError):
    """A provider/model entry that cannot work; the message names the key and the entry."""


@dataclass(frozen=True)
class KindPlan:
    """How one kind runs: its provider, its default model, and the models a job may choose."""

    kind: str
    provider: str
    model: str | None
    allowed_models: tuple[str, ...] = ()

    @property
    def choosable_models(self) -> tuple[str, ...]:
        """The default model plus the allow-list, in that order, without duplicates."""
        models = ((self.model,) if self.model else ()) + self.allowed_models
        return tuple(dict.fromkeys(models))


def base_model_id(model: str) -> str:
    """`us.amazon.nova-lite-v1:0` -> `amazon.nova-lite-v1:0` (what the profile routes to)."""
    for prefix in PROFILE_PREFIXES:
        if model.startswith(prefix):
            return model[len(prefix) :]
    return model


def is_inference_profile(model: str) -> bool:
    return base_model_id(model) != model


def kind_pairs(key: str, raw: str | None) -> dict[str, str]:
    """`a=x;b=y` -> {"a": "x", "b": "y"} (entries trimmed; a kind listed twice is an error)."""
    pairs: dict[str, str] = {}
    for entry in (raw or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        kind, sep, value = (part.strip() for part in entry.partition("="))
        if not sep or not kind or not value:
            raise ProviderPlanError(f"{key}: {entry!r} must be <kind>=<value>")
        if kind in pairs:
            raise ProviderPlanError(f"{key}: kind {kind!r} is listed twice")
        pairs[kind] = value
    return pairs


def _model(key: str, kind: str, model: str) -> str:
    if not _MODEL_ID.fullmatch(model):
        raise ProviderPlanError(f"{key}: {kind}={model!r} is not a model id")
    return model


def parse_provider_plan(
    *,
    stage: str,
    kinds: tuple[str, ...],
    default_provider: str | None,
    kind_providers: str | None = None,
    kind_models: str | None = None,
    kind_allowed_models: str | None = None,
    inherit: Mapping[str, str] | None = None,
) -> tuple[KindPlan, ...]:
    """One KindPlan per configured kind plus `classify`, or `ProviderPlanError` naming the entry.

    `inherit` maps a workflow kind to its child kind: the workflow runs on its child kind's plan
    (a report's final summary uses the summary provider and models), so it takes no entries.
    """
    inherit = {kind: child for kind, child in (inherit or {}).items() if kind in kinds}
    default = (default_provider or "").strip() or ("local" if stage == "local" else "bedrock")
    if default not in PROVIDERS:
        raise ProviderPlanError(f"PROVIDER={default!r} is not one of {list(PROVIDERS)}")
    known = (*kinds, CLASSIFY)
    providers = kind_pairs("KIND_PROVIDERS", kind_providers)
    models = kind_pairs("KIND_MODELS", kind_models)
    allowed = kind_pairs("KIND_ALLOWED_MODELS", kind_allowed_models)
    for key, entries in (
        ("KIND_PROVIDERS", providers),
        ("KIND_MODELS", models),
        ("KIND_ALLOWED_MODELS", allowed),
    ):
        # A shipped kind the stage does not enable (e.g. `-c QUEUE_NAMES=summary` over a file that
        # configures them all) is skipped; any other name is a mistake.
        unknown = sorted(set(entries) - set(known) - SHIPPED_KINDS)
        if unknown:
            raise ProviderPlanError(f"{key} names kinds that are not in QUEUE_NAMES (or classify): {unknown}")
        inheriting = sorted(set(entries) & set(inherit))
        if inheriting:
            raise ProviderPlanError(
                f"{key}: {inheriting} are workflows: they use their child kind's provider and models "
                f"({', '.join(f'{kind} -> {inherit[kind]}' for kind in inheriting)}); configure those instead"
            )
    plans: list[KindPlan] = []
    for kind in known:
        if kind in inherit:
            continue
        provider = providers.get(kind)
        if provider is None:
            provider = default
            if kind not in CAPABILITIES[default] and kind in FALLBACK_PROVIDERS:
                provider = FALLBACK_PROVIDERS[kind]
        if provider not in PROVIDERS:
            raise ProviderPlanError(f"KIND_PROVIDERS: {kind}={provider!r} is not one of {list(PROVIDERS)}")
        if kind not in SHIPPED_KINDS:
            # A kind of your own: its handler decides what it asks of the provider.
            plans.append(KindPlan(kind, provider, models.get(kind)))
            continue
        if kind not in CAPABILITIES[provider]:
            raise ProviderPlanError(
                f"provider {provider!r} cannot run kind {kind!r}; set KIND_PROVIDERS={kind}=<one of "
                f"{sorted(p for p, caps in CAPABILITIES.items() if kind in caps)}>"
            )
        model = models.get(kind) or DEFAULT_MODELS.get(provider, {}).get(kind)
        if model is not None:
            model = _model("KIND_MODELS", kind, model)
        elif provider == "bedrock":
            raise ProviderPlanError(f"KIND_MODELS: kind {kind!r} runs on bedrock and needs a model id")
        extra = tuple(
            _model("KIND_ALLOWED_MODELS", kind, m.strip())
            for m in allowed.get(kind, "").split(",")
            if m.strip()
        )
        plans.append(KindPlan(kind, provider, model, extra))
    by_kind = {plan.kind: plan for plan in plans}
    for kind, child in inherit.items():
        if child not in by_kind:
            raise ProviderPlanError(
                f"workflow {kind!r} runs its parts as {child!r}, which is not in QUEUE_NAMES"
            )
        parent = by_kind[child]
        plans.append(KindPlan(kind, parent.provider, parent.model, parent.allowed_models))
    order = {kind: index for index, kind in enumerate(known)}
    return tuple(sorted(plans, key=lambda plan: order[plan.kind]))


def plans_setting(plans: tuple[KindPlan, ...]) -> dict[str, str]:
    """The plan as environment variables (KIND_PROVIDERS / KIND_MODELS / KIND_ALLOWED_MODELS)."""
    return {
        "KIND_PROVIDERS": ";".join(f"{p.kind}={p.provider}" for p in plans),
        "KIND_MODELS": ";".join(f"{p.kind}={p.model}" for p in plans if p.model),
        "KIND_ALLOWED_MODELS": ";".join(
            f"{p.kind}={','.join(p.allowed_models)}" for p in plans if p.allowed_models
        ),
    }


def plans_from_setting(env: Mapping[str, str]) -> dict[str, KindPlan]:
    """Read back what `plans_setting` wrote (functions trust the validated synth-time plan)."""
    providers = kind_pairs("KIND_PROVIDERS", env.get("KIND_PROVIDERS"))
    models = kind_pairs("KIND_MODELS", env.get("KIND_MODELS"))
    allowed = kind_pairs("KIND_ALLOWED_MODELS", env.get("KIND_ALLOWED_MODELS"))
    return {
        kind: KindPlan(
            kind,
            provider,
            models.get(kind),
            tuple(m for m in allowed.get(kind, "").split(",") if m),
        )
        for kind, provider in providers.items()
    }
