"""Model lifecycle: is every Bedrock model a stage can call still alive, and for how long?

Bedrock retires models: a model turns Legacy (still callable, with an end-of-life date; an account
that has not used it lately may already be locked out), then reaches its end of life, after which
every call fails (`ModelUnavailableError`, aijobs.providers.failures). `GetFoundationModel`
answers `modelDetails.modelLifecycle` (`status` ACTIVE or LEGACY; `legacyTime`,
`publicExtendedAccessTime`, `endOfLifeTime` when AWS has set them), per region; after the end of
life it fails with the end-of-life answer itself. `aijobs models check` and the weekly cron
(aijobs.scheduled.models) both run `check_models` over `bedrock_models(plans)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from aijobs.errors import ModelUnavailableError
from aijobs.provider_plan import KindPlan, base_model_id
from aijobs.providers.failures import aws_failure

# A model's state, as the check reports it. Everything but ACTIVE needs the operator.
ACTIVE = "ACTIVE"
LEGACY = "LEGACY"
END_OF_LIFE = "END_OF_LIFE"
# GetFoundationModel does not know the id (a typo, or a model this region never had).
NOT_FOUND = "NOT_FOUND"
# The check itself failed (no permission, throttled, no network): nothing is known.
UNKNOWN = "UNKNOWN"


def bedrock_models(plans: Iterable[KindPlan]) -> dict[str, tuple[str, ...]]:
    """Every foundation model the plans can call on Bedrock -> the kinds that use it, sorted.

    A kind's default and allow-listed models (`KindPlan.choosable_models`, when it runs on
    Bedrock) and its Bedrock fallbacks count; an inference profile id (`us.amazon.nova-lite-v1:0`)
    counts as the foundation model it routes to.
    """
    kinds: dict[str, set[str]] = {}
    for plan in plans:
        models = list(plan.choosable_models) if plan.provider == "bedrock" else []
        models += [model for provider, model in plan.chain[1:] if provider == "bedrock" and model]
        for model in models:
            kinds.setdefault(base_model_id(model), set()).add(plan.kind)
    return {model: tuple(sorted(kinds[model])) for model in sorted(kinds)}


@dataclass(frozen=True)
class ModelLifecycle:
    """One model in one region."""

    model: str
    region: str
    status: str
    kinds: tuple[str, ...] = ()
    legacy_at: datetime | None = None
    extended_access_at: datetime | None = None
    end_of_life_at: datetime | None = None
    # What AWS answered when the check could not read the lifecycle (its code and message).
    detail: str = ""

    @property
    def alive(self) -> bool:
        return self.status == ACTIVE


def check_model(client: Any, model: str, kinds: tuple[str, ...] = ()) -> ModelLifecycle:
    """The lifecycle of foundation model `model` in the region of `client` (a Bedrock client)."""
    region = str(client.meta.region_name)
    try:
        details = client.get_foundation_model(modelIdentifier=model)["modelDetails"]
    except (ClientError, BotoCoreError) as error:
        failure = aws_failure(error, service="Bedrock", model=model)
        if isinstance(failure, ModelUnavailableError):
            status = LEGACY if failure.reason == ModelUnavailableError.LEGACY else END_OF_LIFE
        elif isinstance(error, ClientError) and _code(error) == "ResourceNotFoundException":
            status = NOT_FOUND
        else:
            status = UNKNOWN
        return ModelLifecycle(model, region, status, kinds, detail=str(failure))
    lifecycle: Mapping[str, Any] = details.get("modelLifecycle") or {}
    return ModelLifecycle(
        model=model,
        region=region,
        # A model without lifecycle data has never been anything but active.
        status=str(lifecycle.get("status") or ACTIVE),
        kinds=kinds,
        legacy_at=lifecycle.get("legacyTime"),
        extended_access_at=lifecycle.get("publicExtendedAccessTime"),
        end_of_life_at=lifecycle.get("endOfLifeTime"),
    )


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def check_models(models: Mapping[str, tuple[str, ...]], clients: Sequence[Any]) -> list[ModelLifecycle]:
    """`check_model` for every model (model -> kinds, as `bedrock_models` returns) in the region
    of every client, in that order: one `GetFoundationModel` call each."""
    return [check_model(client, model, kinds) for model, kinds in models.items() for client in clients]
