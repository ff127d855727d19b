"""`make sam-validate`: `sam validate --lint` on synthesized templates, CDK's W3005 filtered out.

CDK gives every function a `DependsOn` on its role and policy although `Role: Fn::GetAtt` already
orders them; cfn-lint warns about the redundancy (W3005), and `sam validate --lint` fails on any
warning with no option to ignore a rule. cfn-lint does honour a template's own
`Metadata.cfn-lint.config.ignore_checks`, so each template is linted as a copy that carries exactly
that one directive: every other finding, warning or error, still fails the run.

    python scripts/sam_validate.py --sam .venv-sam/bin/sam cdk.out/aijobs-dev.template.json ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Only CDK's own redundant-DependsOn warning; nothing else may be filtered.
IGNORED_CHECKS = ("W3005",)


def lint_copy(template: dict[str, Any]) -> dict[str, Any]:
    """The template with `IGNORED_CHECKS` added to its cfn-lint directive (any existing one kept)."""
    copy: dict[str, Any] = json.loads(json.dumps(template))
    config = copy.setdefault("Metadata", {}).setdefault("cfn-lint", {}).setdefault("config", {})
    config["ignore_checks"] = sorted({*config.get("ignore_checks", []), *IGNORED_CHECKS})
    return copy


def validate(sam: str, templates: Sequence[Path], region: str) -> int:
    """Lint every template (in parallel: each `sam` process is mostly start-up); 1 if any fails."""
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    with tempfile.TemporaryDirectory(prefix="sam-validate-") as folder:
        runs = []
        for index, template in enumerate(templates):
            copy = Path(folder) / f"{index}-{template.name}"
            copy.write_text(json.dumps(lint_copy(json.loads(template.read_text()))))
            command = [sam, "validate", "--lint", "--region", region, "-t", str(copy)]
            process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
            runs.append((template, copy, process))
        failed = 0
        for template, copy, process in runs:
            output, _ = process.communicate()
            # `sam` names the copy; say which template it stands for.
            print(output.replace(str(copy), str(template)).rstrip())
            if process.returncode != 0:
                failed += 1
                print(f"FAILED: {template} (sam validate --lint exit {process.returncode})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sam", default="sam", help="the SAM CLI to run (its own venv)")
    parser.add_argument("--region", default="us-east-1", help="region cfn-lint checks against")
    parser.add_argument("templates", nargs="+", type=Path, help="synthesized *.template.json files")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.templates if not path.is_file()]
    if missing:
        print(f"error: no template {', '.join(missing)}: synthesize first", file=sys.stderr)
        return 2
    started = time.monotonic()
    code = validate(args.sam, args.templates, args.region)
    print(f"sam validate --lint: {len(args.templates)} templates in {time.monotonic() - started:.1f} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
