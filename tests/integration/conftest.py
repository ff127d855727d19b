from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from aijobs import runtime
from aijobs_cdk.stage_config import parse_stage_config
from aijobs_cli.local.resources import provision
from tests.integration.harness import Clock, Stage

KINDS = "summary;embedding;image-generate;image-caption;tts-generate;video-generate"


@pytest.fixture
def stage_values() -> dict[str, str]:
    """The stage configuration under test; delays are zero so retries happen at once."""
    return {
        "QUEUE_NAMES": KINDS,
        "CRONS": "*/10 * * * *",
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
        "PROVIDER_RECHECK_SECONDS": "0",
        # The pipeline's tests run the local provider; adapters have their own tests.
        "PROVIDER": "local",
    }


@pytest.fixture
def stage(stage_values: dict[str, str]) -> Iterator[Stage]:
    with mock_aws():
        runtime.reset_runtime()
        resources = provision(parse_stage_config("dev", stage_values))
        yield Stage(resources=resources, clock=Clock())
    runtime.reset_runtime()
