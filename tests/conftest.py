"""Suite-wide guard: no test may reach a real AWS account."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@pytest.fixture(autouse=True, scope="session")
def _fake_aws_credentials() -> None:
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(key, None)
    os.environ.update(_FAKE_AWS)
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    # X-Ray is a Lambda-side concern; outside Lambda the tracer must stay off.
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"
    # moto's slow paths (rollback copies, partition-wide query sorts): see aijobs_cli.moto_speedups.
    from aijobs_cli import moto_speedups

    moto_speedups.apply()


@pytest.fixture(autouse=True)
def _cli_quiet_is_per_test() -> Iterator[None]:
    """The CLI quiets the library for its own process (metrics off, logs at WARNING): a test that
    invokes it must not change what the tests after it see."""
    from aijobs.observability import logger

    metrics, level = os.environ.get("POWERTOOLS_METRICS_DISABLED"), logger.log_level
    yield
    if metrics is None:
        os.environ.pop("POWERTOOLS_METRICS_DISABLED", None)
    else:
        os.environ["POWERTOOLS_METRICS_DISABLED"] = metrics
    logger.setLevel(level)
