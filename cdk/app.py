"""CDK entry point (`cdk.json` runs this). Stage: `-c stage=prod`, default `dev`."""

from __future__ import annotations

import sys

from aijobs_cdk.app_factory import build_app
from aijobs_cdk.deps_layer import DepsLayerBuildError
from aijobs_cdk.stage_config import ConfigError


def main() -> None:
    try:
        app, _stack, _config = build_app()
    except ConfigError as error:
        sys.exit(f"aijobs: invalid stage configuration: {error}")
    except DepsLayerBuildError as error:
        sys.exit(f"aijobs: {error}")
    app.synth()


if __name__ == "__main__":
    main()
