"""Whether a synthesized role policy allows one recorded access (tests.aws_calls.Access).

A small evaluator for the statements this stack writes, not IAM: Allow statements only (the stack
writes no Deny), `Action` and `Resource` patterns with `*` and `?`, and the condition operators
the stack uses. An operator or key it does not know fails the test instead of passing it.
Template values are resolved with the recorder's account and the stage's region and bucket.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.aws_calls import ACCOUNT, Access
from tests.infra.template import Synth, role_statements

# Operators whose values are patterns (`*`, `?`) and those compared as they are.
_LIKE = {"StringLike", "ArnLike", "ArnEquals"}  # ArnEquals also takes wildcards
_EQUALS = {"StringEquals"}


@dataclass(frozen=True)
class Scope:
    """How template references resolve: the stack's region, and the bucket's logical id -> name."""

    region: str
    buckets: Mapping[str, str]

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if "Ref" in value:
            pseudo = {"AWS::Partition": "aws", "AWS::Region": self.region, "AWS::AccountId": ACCOUNT}
            return pseudo[value["Ref"]]
        if "Fn::GetAtt" in value:
            logical_id, attribute = value["Fn::GetAtt"]
            assert attribute == "Arn", value
            assert logical_id in self.buckets, value
            return f"arn:aws:s3:::{self.buckets[logical_id]}"
        separator, parts = value["Fn::Join"]
        return str(separator).join(self.resolve(part) for part in parts)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _condition_holds(condition: Mapping[str, Any] | None, access: Access, scope: Scope) -> bool:
    if not condition:
        return True
    context = dict(access.context)
    for operator, clauses in condition.items():
        assert operator in _LIKE | _EQUALS, f"the evaluator does not know {operator}"
        for key, wanted in clauses.items():
            assert key in ("bedrock:InferenceProfileArn", "s3:prefix"), f"the evaluator does not know {key}"
            if key not in context:
                return False  # IAM: a condition on a key the request lacks does not match
            values = [scope.resolve(v) for v in _listed(wanted)]
            if operator in _EQUALS:
                matched = context[key] in values
            else:
                matched = any(fnmatch.fnmatchcase(context[key], v) for v in values)
            if not matched:
                return False
    return True


def statement_allows(statement: Mapping[str, Any], access: Access, scope: Scope) -> bool:
    if statement.get("Effect") != "Allow":
        return False
    if not any(fnmatch.fnmatchcase(access.action, a) for a in _listed(statement["Action"])):
        return False
    if access.resource is not None:
        resources = [scope.resolve(r) for r in _listed(statement["Resource"])]
        if not any(fnmatch.fnmatchcase(access.resource, r) for r in resources):
            return False
    return _condition_holds(statement.get("Condition"), access, scope)


def allowed(synth: Synth, function_ids: list[str], access: Access, scope: Scope) -> bool:
    """Whether any statement of the functions' roles allows `access`."""
    return any(
        statement_allows(statement, access, scope)
        for function_id in function_ids
        for statement in role_statements(synth, function_id)
    )
