"""Suite-wide guard: no test may reach a real AWS account. Also: how pytest-xdist groups the tests."""

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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make pytest` runs on pytest-xdist workers with `--dist loadgroup`: tests that share an expensive
    fixture are grouped onto one worker so that it is built once, every other test is scheduled alone."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = _shared_fixture_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _shared_fixture_group(item: pytest.Item) -> str | None:
    path = item.path.relative_to(item.config.rootpath)
    if path.parts[:2] == ("tests", "infra"):
        return "infra"  # the session's CDK synths (jsii) are the cost of every infra test
    info = getattr(item, "_fixtureinfo", None)
    scopes = {defs[-1].scope for defs in info.name2fixturedefs.values()} if info is not None else set()
    if scopes & {"module", "class"}:
        return path.as_posix()  # a module's or a class's local stack, browser or measurement
    return None


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
