"""`make sam-validate` filters CDK's redundant-DependsOn warning (W3005) and nothing else."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint

from scripts.sam_validate import IGNORED_CHECKS, lint_copy, main

# A function whose DependsOn on its role repeats the Role GetAtt (W3005, as CDK writes it), and an
# IAM statement with an action IAM does not have (W3037): the kind of finding that must still fail.
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "Role": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "lambda.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                },
                "Policies": [
                    {
                        "PolicyName": "models",
                        "PolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {"Effect": "Allow", "Action": "bedrock:StartAsyncInvoke", "Resource": "*"}
                            ],
                        },
                    }
                ],
            },
        },
        "Function": {
            "Type": "AWS::Lambda::Function",
            "DependsOn": ["Role"],
            "Properties": {
                "Role": {"Fn::GetAtt": ["Role", "Arn"]},
                "Runtime": "python3.12",
                "Handler": "index.handler",
                "Code": {"ZipFile": "def handler(event, context):\n    return event\n"},
            },
        },
    }
}


def _rules(template: dict[str, Any]) -> set[str]:
    return {match.rule.id for match in lint(json.dumps(template), config=None)}


def test_only_the_redundant_depends_on_warning_is_filtered() -> None:
    assert IGNORED_CHECKS == ("W3005",)
    assert {"W3005", "W3037"} <= _rules(TEMPLATE)
    filtered = _rules(lint_copy(TEMPLATE))
    assert "W3005" not in filtered
    assert "W3037" in filtered


def test_the_lint_copy_adds_one_directive_and_changes_nothing_else() -> None:
    original = copy.deepcopy(TEMPLATE)
    original["Metadata"] = {"Owner": "aijobs", "cfn-lint": {"config": {"ignore_checks": ["I3042"]}}}
    before = copy.deepcopy(original)
    linted = lint_copy(original)
    assert original == before  # the input is not modified
    assert linted["Metadata"] == {
        "Owner": "aijobs",
        "cfn-lint": {"config": {"ignore_checks": ["I3042", "W3005"]}},
    }
    assert {k: v for k, v in linted.items() if k != "Metadata"} == TEMPLATE


def test_a_missing_template_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sam", "/bin/false", str(tmp_path / "aijobs-dev.template.json")]) == 2
    assert "synthesize first" in capsys.readouterr().err


def test_a_failing_sam_run_fails_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "aijobs-dev.template.json"
    template.write_text(json.dumps(TEMPLATE))
    assert main(["--sam", "/bin/false", str(template)]) == 1
    assert f"FAILED: {template}" in capsys.readouterr().err
    assert main(["--sam", "/bin/true", str(template)]) == 0
