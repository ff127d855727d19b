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
the capability. This module is data and parsing only (no AWS, no provider imports), so the CDK
app and every function can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aijobs.kinds.base import Kind

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

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}")


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
    kind_fallbacks: str | None = None,
    inherit: Mapping[str, str] | None = None,
    declarations: Mapping[str, Kind] | None = None,
) -> tuple[KindPlan, ...]:
    """One KindPlan per configured kind plus `classify`, or `ProviderPlanError` naming the entry.

    `inherit` maps a workflow kind to its child kind: the workflow runs on its child kind's plan
    (a report's final summary uses the summary provider and models), so it takes no entries.
    `declarations` maps each kind to its declaration (read from aijobs.kinds when not given).
    """
    inherit = {kind: child for kind, child in (inherit or {}).items() if kind in kinds}
    default = (default_provider or "").strip() or ("local" if stage == "local" else "bedrock")
    if default not in PROVIDERS:
        raise ProviderPlanError(f"PROVIDER={default!r} is not one of {list(PROVIDERS)}")
    known = tuple(dict.fromkeys((*kinds, CLASSIFY)))
    found = dict(declarations) if declarations is not None else _declarations(known, inherit)
    providers = kind_pairs("KIND_PROVIDERS", kind_providers)
    models = kind_pairs("KIND_MODELS", kind_models)
    allowed = kind_pairs("KIND_ALLOWED_MODELS", kind_allowed_models)
    fallbacks = kind_pairs("KIND_FALLBACKS", kind_fallbacks)
    declared = set(found) | _declared_names()
    for key, entries in (
        ("KIND_PROVIDERS", providers),
        ("KIND_MODELS", models),
        ("KIND_ALLOWED_MODELS", allowed),
        ("KIND_FALLBACKS", fallbacks),
    ):
        # A declared kind the stage does not deploy (e.g. `-c QUEUE_NAMES=summary` over a file
        # that configures them all) is skipped; any other name is a mistake.
        unknown = sorted(set(entries) - set(known) - declared)
        if unknown:
            raise ProviderPlanError(f"{key} names kinds that are not declared (aijobs/kinds/): {unknown}")
        inheriting = sorted(set(entries) & set(inherit))
        if inheriting:
            raise ProviderPlanError(
                f"{key}: {inheriting} are workflows: they use their child kind's provider and models "
                f"({', '.join(f'{kind} -> {inherit[kind]}' for kind in inheriting)}); configure those instead"
            )
    plans: list[KindPlan] = []
    for name in known:
        if name in inherit:
            continue
        kind = found.get(name)
        if kind is None:
            # Not declared: the synth refuses it (aijobs_cdk.stage.check_registrations names it);
            # the parser alone (tests, tools) plans it on the stage's provider without a model.
            plans.append(KindPlan(name, providers.get(name, default), models.get(name)))
            continue
        provider = _provider(kind, providers.get(name), default, stage)
        model = models.get(name) or kind.models.get(provider)
        if model is None and provider == "local":
            model = LOCAL_MODELS[kind.capability]
        if model is not None:
            model = _model("KIND_MODELS", name, model)
        elif provider not in MODELLESS_PROVIDERS:
            raise ProviderPlanError(
                f"kind {name!r} runs on {provider} but declares no {provider} model: add one to its "
                f"`models` (aijobs/kinds/{name.replace('-', '_')}.py) or set KIND_MODELS={name}=<model id>"
            )
        if allowed.get(name) == NONE:
            extra: tuple[str, ...] = ()
        elif name in allowed:
            extra = tuple(
                _model("KIND_ALLOWED_MODELS", name, m.strip()) for m in allowed[name].split(",") if m.strip()
            )
        else:
            extra = tuple(kind.allowed_models.get(provider, ()))
        if fallbacks.get(name) == NONE:
            chain: tuple[str, ...] = ()
        elif name in fallbacks:
            chain = _fallbacks(name, fallbacks[name])
        else:
            chain = tuple(kind.fallbacks.get(provider, ()))
        for ref in chain:
            fallback_provider, fallback_model = split_model_ref(ref)
            _check_serves(name, kind.capability, fallback_provider, key="KIND_FALLBACKS")
            _model("KIND_FALLBACKS", name, fallback_model)
        plans.append(KindPlan(name, provider, model, extra, chain, kind.capability))
    by_kind = {plan.kind: plan for plan in plans}
    for kind_name, child in inherit.items():
        if child not in by_kind:
            raise ProviderPlanError(
                f"workflow {kind_name!r} runs its parts as {child!r}, which is not in QUEUE_NAMES"
            )
        parent = by_kind[child]
        plans.append(
            KindPlan(
                kind_name,
                parent.provider,
                parent.model,
                parent.allowed_models,
                parent.fallbacks,
                parent.capability,
            )
        )
    order = {kind: index for index, kind in enumerate(known)}
    return tuple(sorted(plans, key=lambda plan: order[plan.kind]))


def _declarations(known: tuple[str, ...], inherit: Mapping[str, str]) -> dict[str, Kind]:
    from aijobs.kinds.registry import kind

    found = {}
    for name in known:
        if name in inherit:
            continue
        declaration = kind(name)
        if declaration is not None:
            found[name] = declaration
    return found


def _declared_names() -> set[str]:
    from aijobs.kinds.registry import declared

    return set(declared())


def _check_serves(kind: str, capability: str, provider: str, *, key: str) -> None:
    if provider not in PROVIDERS:
        raise ProviderPlanError(f"{key}: {kind}: provider {provider!r} is not one of {list(PROVIDERS)}")
    if capability not in PROVIDER_CAPABILITIES[provider]:
        able = sorted(p for p, caps in PROVIDER_CAPABILITIES.items() if capability in caps)
        raise ProviderPlanError(
            f"{key}: kind {kind!r} needs the {capability} capability, which provider {provider!r} does "
            f"not offer (providers that do: {able})"
        )


def _provider(kind: Kind, chosen: str | None, default: str, stage: str) -> str:
    if chosen is not None:
        _check_serves(kind.name, kind.capability, chosen, key="KIND_PROVIDERS")
        return chosen
    if kind.capability in PROVIDER_CAPABILITIES[default] and (default in kind.models or default == "local"):
        return default
    for provider in kind.models:
        if provider == "local" and stage != "local":
            continue
        if provider in PROVIDERS and kind.capability in PROVIDER_CAPABILITIES[provider]:
            return provider
    able = sorted(p for p, caps in PROVIDER_CAPABILITIES.items() if kind.capability in caps)
    raise ProviderPlanError(
        f"kind {kind.name!r} needs the {kind.capability} capability, which the stage's provider "
        f"{default!r} does not offer, and it declares no model on a provider that does: set "
        f"KIND_PROVIDERS={kind.name}=<one of {able}> or add a model to its `models`"
    )


def _fallbacks(kind: str, raw: str) -> tuple[str, ...]:
    refs = tuple(ref.strip() for ref in raw.split(",") if ref.strip())
    for ref in refs:
        if not ref.partition(":")[2]:
            raise ProviderPlanError(f"KIND_FALLBACKS: {kind}: {ref!r} must be <provider>:<model>")
    return refs


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
