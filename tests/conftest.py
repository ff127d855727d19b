"""Suite-wide guard: no test may reach a real AWS account. Also: how pytest-xdist shares out the tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

_FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make pytest` runs on pytest-xdist workers with `--dist loadfile`: each test file goes to one
    worker, so a module's or a class's fixture (a local stack, a browser, a measurement) is built once;
    here the infra files also go together, since the session's CDK synths (jsii) are their cost.
    (xdist's `loadgroup` marks do not group under pytest 9: it renames `item._nodeid`, which pytest 9
    no longer reads.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/infra" if path.startswith("tests/infra/") else path

    return SharedFixtureScheduling(config, log)


@pytest.fixture(autouse=True, scope="session")
def _fake_aws_credentials() -> None:
    for key in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(key, None)
    os.environ.update(_FAKE_AWS)
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    # X-Ray is a Lambda-side concern; outside Lambda the tracer must stay off.
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"
    # moto's slow paths (rollback copies, partition-wide query sorts): see aijobs_cli.moto_patches.
    from aijobs_cli import moto_patches

    moto_patches.apply()


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
