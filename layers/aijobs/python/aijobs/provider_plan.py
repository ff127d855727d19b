"""Which provider and model serve each job kind on a stage: derived from the kinds' declarations
(aijobs.kinds) and the stage's overrides, validated at synth time.

A kind declares its capability and its default model per provider; the stage picks the provider:

- `PROVIDER`: the stage's default provider (`local` on the local stage, `bedrock` elsewhere). A
  kind whose capability it does not offer runs on the first provider of the kind's `models` that
  does (speech on a Bedrock stage: Polly);
- `KIND_PROVIDERS=summary=bedrock;embedding=openai`: per-kind provider overrides;
- `KIND_MODELS=summary=amazon.nova-lite-v1:0`: per-kind model overrides (model ids contain `:`,
  hence `=`);
- `KIND_ALLOWED_MODELS=summary=amazon.nova-lite-v1:0,amazon.nova-pro-v1:0`: what a job's `model`
  field may choose besides the default (else the kind's declared `allowed_models`);
- `KIND_FALLBACKS=summary=bedrock:us.amazon.nova-pro-v1:0,openai:gpt-4o-mini`: models tried in
  order when the first cannot answer (else the kind's declared `fallbacks`); `summary=none` for
  none (so too for KIND_ALLOWED_MODELS).

A capability the chosen provider cannot serve is a synth error naming the kind, the provider and
the capability. This module is data only (no AWS, no provider imports): the plan's shape and the
settings the functions read back. Deriving the plan from the kinds' declarations is build-time
work (cdk synth, the local stack) and lives in aijobs_cdk.provider_plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PROVIDERS = ("local", "bedrock", "polly", "openai")
# The synchronous short-task path's kind (aijobs/kinds/classify.py): planned on every stage.
CLASSIFY = "classify"

# The capabilities each provider's adapter implements (a unit test holds the adapters to it).
PROVIDER_CAPABILITIES: Mapping[str, frozenset[str]] = {
    "local": frozenset({"text", "embedding", "image", "speech", "video"}),
    "bedrock": frozenset({"text", "embedding", "image", "video"}),
    "polly": frozenset({"speech"}),
    "openai": frozenset({"text", "embedding", "image"}),
}
# The local provider's model per capability (aijobs.providers.local.MODELS adds a second text
# model), for kinds that declare none: every kind runs on the local stage.
LOCAL_MODELS: Mapping[str, str] = {
    "text": "local-text-1",
    "embedding": "local-embedding-1",
    "image": "local-image-1",
    "speech": "local-tts-1",
    "video": "local-video-1",
}
# `KIND_ALLOWED_MODELS=summary=none` / `KIND_FALLBACKS=summary=none`: none of the declared ones.
NONE = "none"
# Providers that need no model id (their kind's declaration may say None).
MODELLESS_PROVIDERS = frozenset({"polly"})
# Cross-region inference profile prefixes (`us.amazon.nova-lite-v1:0`).
PROFILE_PREFIXES = ("us.", "eu.", "apac.", "us-gov.", "ca.", "jp.", "au.", "global.")


class ProviderPlanError(ValueError):
    """A provider/model entry that cannot work; the message names the key and the entry."""


@dataclass(frozen=True)
class KindPlan:
    """How one kind runs: its provider, its default model, the models a job may choose, and the
    models to fall back to (`provider:model` each)."""

    kind: str
    provider: str
    model: str | None
    allowed_models: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()
    # The kind's capability (known where declarations were read: synth, the local stack; not part
    # of what the functions read back, so not part of equality).
    capability: str | None = field(default=None, compare=False)

    @property
    def choosable_models(self) -> tuple[str, ...]:
        """The default model plus the allow-list, in that order, without duplicates."""
        models = ((self.model,) if self.model else ()) + self.allowed_models
        return tuple(dict.fromkeys(models))

    @property
    def chain(self) -> tuple[tuple[str, str | None], ...]:
        """(provider, model) of the default model, then of each fallback, in order."""
        return ((self.provider, self.model), *(split_model_ref(ref) for ref in self.fallbacks))


def split_model_ref(ref: str) -> tuple[str, str]:
    """`bedrock:us.amazon.nova-pro-v1:0` -> ("bedrock", "us.amazon.nova-pro-v1:0")."""
    provider, _, model = ref.partition(":")
    return provider, model


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


def plans_setting(plans: tuple[KindPlan, ...]) -> dict[str, str]:
    """The plan as environment variables (KIND_PROVIDERS / _MODELS / _ALLOWED_MODELS / _FALLBACKS)."""
    return {
        "KIND_PROVIDERS": ";".join(f"{p.kind}={p.provider}" for p in plans),
        "KIND_MODELS": ";".join(f"{p.kind}={p.model}" for p in plans if p.model),
        "KIND_ALLOWED_MODELS": ";".join(
            f"{p.kind}={','.join(p.allowed_models)}" for p in plans if p.allowed_models
        ),
        "KIND_FALLBACKS": ";".join(f"{p.kind}={','.join(p.fallbacks)}" for p in plans if p.fallbacks),
    }


def plans_from_setting(env: Mapping[str, str]) -> dict[str, KindPlan]:
    """Read back what `plans_setting` wrote (functions trust the validated synth-time plan)."""
    providers = kind_pairs("KIND_PROVIDERS", env.get("KIND_PROVIDERS"))
    models = kind_pairs("KIND_MODELS", env.get("KIND_MODELS"))
    allowed = kind_pairs("KIND_ALLOWED_MODELS", env.get("KIND_ALLOWED_MODELS"))
    fallbacks = kind_pairs("KIND_FALLBACKS", env.get("KIND_FALLBACKS"))
    return {
        kind: KindPlan(
            kind,
            provider,
            models.get(kind),
            tuple(m for m in allowed.get(kind, "").split(",") if m),
            tuple(ref for ref in fallbacks.get(kind, "").split(",") if ref),
        )
        for kind, provider in providers.items()
    }
