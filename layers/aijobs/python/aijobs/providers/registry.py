"""Provider adapters by name, built from a function's settings: one instance per process.

A consumer serves one kind, so it builds the provider its kind's plan names (and those of its
fallback models); the API builds the one `classify` runs on. Adapters know no kinds and no
models until a request names one; they create their AWS/HTTP clients lazily: building one costs
no I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING

from aijobs.provider_plan import PROVIDERS

if TYPE_CHECKING:
    from aijobs.providers.base import CapabilityRequest, Provider
    from aijobs.settings import _ProviderSettings

PROVIDER_NAMES = PROVIDERS
# How long a fetched OpenAI-compatible key is reused before Secrets Manager is asked again, so a
# rotated key is picked up within minutes without a call per job.
SECRET_MAX_AGE_SECONDS = 300

_INSTANCES: dict[tuple[str, str], Provider] = {}


def get_provider(name: str) -> Provider:
    """The `local` provider (kept for callers that need no configuration); others need settings."""
    if name != "local":
        if name not in PROVIDER_NAMES:
            raise ValueError(f"unknown provider {name!r}; known providers: {', '.join(PROVIDER_NAMES)}")
        raise ValueError(f"provider {name!r} needs its settings: use build_provider()")
    # Imported here like the other adapters: deployed stages never run the local one.
    from aijobs.providers.local import LocalProvider

    return _cached(("local", ""), LocalProvider)


def build_provider(name: str, settings: _ProviderSettings, *, bucket: str | None) -> Provider:
    """The adapter called `name`, configured from the function's settings; cached per process."""
    if name == "local":
        return get_provider("local")
    if name == "bedrock":
        from aijobs.providers.bedrock import BedrockProvider

        return _cached(("bedrock", ""), lambda: BedrockProvider(bucket=_need(bucket)))
    if name == "polly":
        from aijobs.providers.polly import PollyProvider

        return _cached(("polly", ""), lambda: PollyProvider(bucket=_need(bucket)))
    if name == "openai":
        from aijobs.providers.openai import OpenAIProvider

        key = openai_key_source(settings.openai_secret_name)
        return _cached(
            ("openai", settings.openai_base_url),
            lambda: OpenAIProvider(api_key=key, base_url=settings.openai_base_url),
        )
    raise ValueError(f"unknown provider {name!r}; known providers: {', '.join(PROVIDER_NAMES)}")


def openai_key_source(secret_name: str | None) -> Callable[[], str | None]:
    """Where the OpenAI-compatible key comes from: a Secrets Manager secret through Powertools
    parameters (cached SECRET_MAX_AGE_SECONDS, never logged), or locally the OPENAI_API_KEY
    variable of the developer's shell (None: a local server without auth, e.g. Ollama)."""
    if secret_name is None:
        return lambda: os.environ.get("OPENAI_API_KEY") or None

    def from_secret() -> str | None:
        from aws_lambda_powertools.utilities import parameters

        value = parameters.get_secret(secret_name, max_age=SECRET_MAX_AGE_SECONDS)
        return value if isinstance(value, str) else value.decode()

    return from_secret


def request_check(name: str) -> Callable[[CapabilityRequest], None]:
    """The `check_request` of provider `name`'s adapter module: its pure check of a request's
    options for the model the request names (no adapter built, no settings, no I/O). The API runs
    it at submit; the adapter's own calls run the very same function."""
    if name not in PROVIDER_NAMES:
        raise ValueError(f"unknown provider {name!r}; known providers: {', '.join(PROVIDER_NAMES)}")
    check: Callable[[CapabilityRequest], None] = import_module(f"aijobs.providers.{name}").check_request
    return check


def reset_providers() -> None:
    """Forget built adapters (tests, local stack restarts)."""
    _INSTANCES.clear()


def _need(bucket: str | None) -> str:
    if not bucket:
        raise ValueError("this provider writes into the stage bucket: BUCKET_NAME is required")
    return bucket


def _cached(key: tuple[str, str], factory: Callable[[], Provider]) -> Provider:
    provider = _INSTANCES.get(key)
    if provider is None:
        provider = _INSTANCES[key] = factory()
    return provider
