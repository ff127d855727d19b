"""Small readers over a synthesized CloudFormation template (plain dicts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk.assertions import Template

from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stacks.aijobs_stack import AijobsStack
from aijobs_cdk.stage_config import StageConfig


@dataclass
class Synth:
    app: cdk.App
    stack: AijobsStack
    config: StageConfig
    template: Template
    json: dict[str, Any]
    outdir: Path

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def props(self, logical_id: str) -> dict[str, Any]:
        properties: dict[str, Any] = self.json["Resources"][logical_id].get("Properties", {})
        return properties

    def functions_by_handler(self, handler: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource["Properties"]
            for logical_id, resource in self.resources("AWS::Lambda::Function").items()
            if resource["Properties"].get("Handler") == handler
        }


def cli_context(overrides: dict[str, object]) -> dict[str, object]:
    """The context `npx cdk synth -c key=value` passes: cdk.json's context (feature flags) + overrides."""
    base: dict[str, object] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return {**base, **overrides}


def target_id(reference: Any) -> str:
    """The logical id behind `{"Ref": id}` or `{"Fn::GetAtt": [id, attr]}`."""
    if "Ref" in reference:
        return str(reference["Ref"])
    return str(reference["Fn::GetAtt"][0])


def role_statements(synth: Synth, function_id: str) -> list[dict[str, Any]]:
    """Every IAM statement attached to a function's role."""
    role = target_id(synth.props(function_id)["Role"])
    return [
        statement
        for policy in synth.resources("AWS::IAM::Policy").values()
        if role in [target_id(r) for r in policy["Properties"]["Roles"]]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def symbolic(value: Any) -> str:
    """A template value as text: `Ref`/`GetAtt` become `ref:<logical id>`, `Fn::Join` is joined,
    anything else a placeholder. A settings model reads the result as it would the deployed value."""
    if isinstance(value, str):
        return value
    if "Ref" in value or "Fn::GetAtt" in value:
        return f"ref:{target_id(value)}"
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(symbolic(part) for part in parts)
    return "<resolved>"


def symbolic_environment(props: dict[str, Any]) -> dict[str, str]:
    """A function's environment, each value through `symbolic`."""
    return {key: symbolic(value) for key, value in props["Environment"]["Variables"].items()}
