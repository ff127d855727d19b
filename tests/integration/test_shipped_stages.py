"""Every function of each shipped stage builds from its own environment: settings, provider
adapters, clients. The rest of the suite runs the local provider, so a stage as shipped (Bedrock,
Polly for speech, the workflow kinds) is built here, as each function's first invocation builds it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from moto import mock_aws

from aijobs import runtime
from scripts.benchmark import made_up_resources

pytestmark = pytest.mark.integration


def _functions(stage: str) -> list[tuple[str, dict[str, str], Callable[[], Any]]]:
    resources = made_up_resources(stage)
    return [
        ("api", resources.api_env(), runtime.api_service),
        *(
            (f"consumer of {kind}", resources.consumer_env(kind), runtime.consumer)
            for kind in resources.config.queue_names
        ),
        ("dlq consumer", resources.dlq_env(), runtime.dead_letter_consumer),
        ("webhook consumer", resources.webhook_env(), runtime.webhook_consumer),
        ("cron dispatcher", resources.cron_env(), runtime.cron_context),
    ]


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_every_function_of_a_shipped_stage_builds_from_its_environment(
    stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    functions = _functions(stage)
    assert any(kind.endswith("report") for kind, _, _ in functions)  # the workflows are in
    with mock_aws():
        for name, env, build in functions:
            with monkeypatch.context() as patch:
                for key, value in env.items():
                    patch.setenv(key, value)
                runtime.reset_runtime()
                try:
                    build()
                except Exception as error:  # named with the function that failed
                    pytest.fail(f"{stage}: the {name} fails to build: {error!r}")
    runtime.reset_runtime()
