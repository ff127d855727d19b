"""Build the CDK app for one stage: used by `cdk/app.py` and by the infra tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stacks.aijobs_stack import AijobsStack
from aijobs_cdk.stage import DEFAULT_STAGE, load_stage_config
from aijobs_cdk.stage_config import KNOWN_KEYS, StageConfig


def stack_name(stage: str) -> str:
    return f"aijobs-{stage}"


def build_app(
    context: Mapping[str, object] | None = None, *, outdir: str | None = None, env_dir: Path = REPO_ROOT
) -> tuple[cdk.App, AijobsStack, StageConfig]:
    """Create the app with cdk-nag's AwsSolutions checks; `context` as given with `-c key=value`."""
    app = cdk.App(context=dict(context) if context else None, outdir=outdir)
    stage = str(app.node.try_get_context("stage") or DEFAULT_STAGE)
    overrides = {key: value for key in KNOWN_KEYS if (value := app.node.try_get_context(key)) is not None}
    config = load_stage_config(stage, overrides, env_dir=env_dir)
    stack = AijobsStack(
        app,
        stack_name(stage),
        config=config,
        description=f"aijobs ({stage}): asynchronous AI jobs on SQS, Lambda and DynamoDB",
    )
    cdk.Tags.of(app).add("app", "aijobs")
    cdk.Tags.of(app).add("stage", stage)
    # cdk-nag v3 runs as a CDK policy-validation plugin: findings fail `cdk synth`.
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack, config
