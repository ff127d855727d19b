"""The provider plan derived at build time (cdk synth, the local stack): each kind's provider and
models from the kinds' declarations (aijobs.kinds) and the stage's KIND_* overrides, validated.

The functions never run this: they read back the validated plan the stack wrote into their
environment (aijobs.provider_plan.plans_from_setting). Keys and their meaning:
aijobs.provider_plan's docstring and docs/reference/configuration.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from aijobs.kinds.base import Kind
from aijobs.kinds.registry import declared, kind
from aijobs.provider_plan import (
    CLASSIFY,
    LOCAL_MODELS,
    MODELLESS_PROVIDERS,
    NONE,
    PROVIDER_CAPABILITIES,
    PROVIDERS,
    KindPlan,
    ProviderPlanError,
    kind_pairs,
    split_model_ref,
)

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}")
_KEYS = ("KIND_PROVIDERS", "KIND_MODELS", "KIND_ALLOWED_MODELS", "KIND_FALLBACKS")


@dataclass(frozen=True)
class _Overrides:
    """The stage's KIND_* entries, each as {kind: value}."""

    providers: dict[str, str]
    models: dict[str, str]
    allowed: dict[str, str]
    fallbacks: dict[str, str]

    def by_key(self) -> tuple[tuple[str, dict[str, str]], ...]:
        return tuple(zip(_KEYS, (self.providers, self.models, self.allowed, self.fallbacks), strict=True))


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
    inherit = {name: child for name, child in (inherit or {}).items() if name in kinds}
    default = (default_provider or "").strip() or ("local" if stage == "local" else "bedrock")
    if default not in PROVIDERS:
        raise ProviderPlanError(f"PROVIDER={default!r} is not one of {list(PROVIDERS)}")
    known = tuple(dict.fromkeys((*kinds, CLASSIFY)))
    found = dict(declarations) if declarations is not None else _declarations(known, inherit)
    overrides = _Overrides(
        kind_pairs("KIND_PROVIDERS", kind_providers),
        kind_pairs("KIND_MODELS", kind_models),
        kind_pairs("KIND_ALLOWED_MODELS", kind_allowed_models),
        kind_pairs("KIND_FALLBACKS", kind_fallbacks),
    )
    _check_names(overrides, known, set(found) | set(declared()), inherit)
    plans: list[KindPlan] = []
    for name in known:
        if name in inherit:
            continue
        declaration = found.get(name)
        if declaration is None:
            # Not declared: the synth refuses it (aijobs_cdk.stage.check_registrations names it);
            # the parser alone (tests, tools) plans it on the stage's provider without a model.
            plans.append(KindPlan(name, overrides.providers.get(name, default), overrides.models.get(name)))
            continue
        plans.append(_plan(declaration, overrides, default, stage))
    plans.extend(_inherited(plans, inherit))
    order = {name: index for index, name in enumerate(known)}
    return tuple(sorted(plans, key=lambda plan: order[plan.kind]))


def _check_names(
    overrides: _Overrides, known: tuple[str, ...], declared_names: set[str], inherit: Mapping[str, str]
) -> None:
    for key, entries in overrides.by_key():
        # A declared kind the stage does not deploy (e.g. `-c QUEUE_NAMES=summary` over a file
        # that configures them all) is skipped; any other name is a mistake.
        unknown = sorted(set(entries) - set(known) - declared_names)
        if unknown:
            raise ProviderPlanError(f"{key} names kinds that are not declared (aijobs/kinds/): {unknown}")
        inheriting = sorted(set(entries) & set(inherit))
        if inheriting:
            raise ProviderPlanError(
                f"{key}: {inheriting} are workflows: they use their child kind's provider and models "
                f"({', '.join(f'{name} -> {inherit[name]}' for name in inheriting)}); configure those instead"
            )


def _plan(declaration: Kind, overrides: _Overrides, default: str, stage: str) -> KindPlan:
    name = declaration.name
    provider = _provider(declaration, overrides.providers.get(name), default, stage)
    model = overrides.models.get(name) or declaration.models.get(provider)
    if model is None and provider == "local":
        model = LOCAL_MODELS[declaration.capability]
    if model is not None:
        model = _model("KIND_MODELS", name, model)
    elif provider not in MODELLESS_PROVIDERS:
        raise ProviderPlanError(
            f"kind {name!r} runs on {provider} but declares no {provider} model: add one to its "
            f"`models` (aijobs/kinds/{name.replace('-', '_')}.py) or set KIND_MODELS={name}=<model id>"
        )
    if overrides.allowed.get(name) == NONE:
        extra: tuple[str, ...] = ()
    elif name in overrides.allowed:
        extra = tuple(
            _model("KIND_ALLOWED_MODELS", name, m.strip())
            for m in overrides.allowed[name].split(",")
            if m.strip()
        )
    else:
        extra = tuple(declaration.allowed_models.get(provider, ()))
    if overrides.fallbacks.get(name) == NONE:
        chain: tuple[str, ...] = ()
    elif name in overrides.fallbacks:
        chain = _fallbacks(name, overrides.fallbacks[name])
    else:
        chain = tuple(declaration.fallbacks.get(provider, ()))
    for ref in chain:
        fallback_provider, fallback_model = split_model_ref(ref)
        _check_serves(name, declaration.capability, fallback_provider, key="KIND_FALLBACKS")
        _model("KIND_FALLBACKS", name, fallback_model)
    return KindPlan(name, provider, model, extra, chain, declaration.capability)


def _inherited(plans: list[KindPlan], inherit: Mapping[str, str]) -> list[KindPlan]:
    """A workflow's plan is its child kind's, under the workflow's name."""
    by_kind = {plan.kind: plan for plan in plans}
    inherited = []
    for name, child in inherit.items():
        if child not in by_kind:
            raise ProviderPlanError(
                f"workflow {name!r} runs its parts as {child!r}, which is not in QUEUE_NAMES"
            )
        parent = by_kind[child]
        inherited.append(
            KindPlan(
                name,
                parent.provider,
                parent.model,
                parent.allowed_models,
                parent.fallbacks,
                parent.capability,
            )
        )
    return inherited


def _model(key: str, name: str, model: str) -> str:
    if not _MODEL_ID.fullmatch(model):
        raise ProviderPlanError(f"{key}: {name}={model!r} is not a model id")
    return model


def _declarations(known: tuple[str, ...], inherit: Mapping[str, str]) -> dict[str, Kind]:
    found = {}
    for name in known:
        if name in inherit:
            continue
        declaration = kind(name)
        if declaration is not None:
            found[name] = declaration
    return found


def _check_serves(name: str, capability: str, provider: str, *, key: str) -> None:
    if provider not in PROVIDERS:
        raise ProviderPlanError(f"{key}: {name}: provider {provider!r} is not one of {list(PROVIDERS)}")
    if capability not in PROVIDER_CAPABILITIES[provider]:
        able = sorted(p for p, caps in PROVIDER_CAPABILITIES.items() if capability in caps)
        raise ProviderPlanError(
            f"{key}: kind {name!r} needs the {capability} capability, which provider {provider!r} does "
            f"not offer (providers that do: {able})"
        )


def _provider(declaration: Kind, chosen: str | None, default: str, stage: str) -> str:
    if chosen is not None:
        _check_serves(declaration.name, declaration.capability, chosen, key="KIND_PROVIDERS")
        return chosen
    capability = declaration.capability
    if capability in PROVIDER_CAPABILITIES[default] and (default in declaration.models or default == "local"):
        return default
    for provider in declaration.models:
        if provider == "local" and stage != "local":
            continue
        if provider in PROVIDERS and capability in PROVIDER_CAPABILITIES[provider]:
            return provider
    able = sorted(p for p, caps in PROVIDER_CAPABILITIES.items() if capability in caps)
    raise ProviderPlanError(
        f"kind {declaration.name!r} needs the {capability} capability, which the stage's provider "
        f"{default!r} does not offer, and it declares no model on a provider that does: set "
        f"KIND_PROVIDERS={declaration.name}=<one of {able}> or add a model to its `models`"
    )


def _fallbacks(name: str, raw: str) -> tuple[str, ...]:
    refs = tuple(ref.strip() for ref in raw.split(",") if ref.strip())
    for ref in refs:
        if not ref.partition(":")[2]:
            raise ProviderPlanError(f"KIND_FALLBACKS: {name}: {ref!r} must be <provider>:<model>")
    return refs
