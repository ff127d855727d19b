"""The app is synthesized once per configuration per test session (jsii start-up is the cost)."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Template

from aijobs_cdk.app_factory import build_app
from tests.infra.template import Synth, cli_context


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


@pytest.fixture(scope="session")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    return _synth(tmp_path_factory, {"stage": "prod"})


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
            # Providers: embedding on an OpenAI-compatible endpoint, summary with a second model.
            "KIND_PROVIDERS": "embedding=openai",
            "OPENAI_SECRET_NAME": "aijobs/openai-key",
            "KIND_ALLOWED_MODELS": "summary=amazon.nova-pro-v1:0",
        },
    )
