"""The app is synthesized once per configuration per test session (jsii start-up is the cost)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aws_cdk.assertions import Template

from aijobs_cdk import deps_layer
from aijobs_cdk.app_factory import build_app
from tests.infra.template import Synth, cli_context


@pytest.fixture(scope="session", autouse=True)
def deps_layer_cache() -> Path:
    """The dependency layer, built once (pip, only on a cold cache): every synth links it from there."""
    return deps_layer.ensure_built()


def _synth(tmp_path_factory: pytest.TempPathFactory, context: dict[str, object]) -> Synth:
    outdir = tmp_path_factory.mktemp("cdk.out")
    app, stack, config = build_app(cli_context(context), outdir=str(outdir))
    assembly = app.synth()
    template_json = assembly.get_stack_by_name(stack.stack_name).template
    return Synth(app, stack, config, Template.from_json(template_json), template_json, outdir)


@pytest.fixture(scope="session")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The shipped `.env.dev`, as `cdk synth` builds it."""
    return _synth(tmp_path_factory, {})


# The shipped `.env.prod` has no alert destination (a production stage refuses to synthesize
# without one): pass one as `cdk synth -c stage=prod -c ALERT_EMAIL=...` would.
PROD_ALERT_EMAIL = "ops@example.com"
# An existing topic instead of a created one (ALERT_TOPIC_ARN), on the `capped` stage.
EXTERNAL_TOPIC_ARN = "arn:aws:sns:us-east-1:123456789012:team-pager"


@pytest.fixture(scope="session")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _synth(tmp_path_factory, {"stage": "prod", "ALERT_EMAIL": PROD_ALERT_EMAIL})


@pytest.fixture(scope="session")
def single_consumer(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """QUEUE_MAX_CONCURRENCY=1 (the case MaximumConcurrency cannot express), one queue, no crons."""
    return _synth(
        tmp_path_factory,
        {"QUEUE_MAX_CONCURRENCY": "1", "QUEUE_NAMES": "summary", "CRONS": "", "KIND_PRICES": ""},
    )


@pytest.fixture(scope="session")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _synth(
        tmp_path_factory,
        {
            "QUEUE_MAX_CONCURRENCY": "5",
            "QUEUE_NAMES": "summary; embedding ;summary",
            "SHARD_COUNT": "2",
            "CRONS": "*/10 * * * *;*/5 * * * *",
            "KIND_PRICES": "summary:2",
            "MAX_RETRIES": "2",
            "AUTH_MODE": "jwt",
            "JWT_ISSUER_URL": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example",
            "JWT_AUDIENCE": "example-client-id",
            "JWT_OPERATOR_GROUP": "platform-oncall",
            # Providers: embedding on an OpenAI-compatible endpoint, summary with a second model.
            "KIND_PROVIDERS": "embedding=openai",
            "OPENAI_SECRET_NAME": "aijobs/openai-key",
            "KIND_ALLOWED_MODELS": "summary=amazon.nova-pro-v1:0",
            "ALERT_TOPIC_ARN": EXTERNAL_TOPIC_ARN,
        },
    )
