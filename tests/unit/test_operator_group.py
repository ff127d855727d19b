"""AUTH_MODE=jwt: which `cognito:groups` claims make an operator (exactly JWT_OPERATOR_GROUP)."""

from __future__ import annotations

from typing import Any

import pytest

from aijobs.api.service import token_groups


@pytest.mark.parametrize(
    ("claim", "groups"),
    [
        # The token's own JSON array (a Lambda authorizer, or the claim as decoded).
        (["aijobs-operators", "billing"], {"aijobs-operators", "billing"}),
        # What API Gateway's JWT authorizer passes for an array claim: flattened to a string.
        ("[aijobs-operators billing]", {"aijobs-operators", "billing"}),
        ("[aijobs-operators, billing]", {"aijobs-operators", "billing"}),
        ('["aijobs-operators", "billing"]', {"aijobs-operators", "billing"}),
        ("aijobs-operators,billing", {"aijobs-operators", "billing"}),
        ("aijobs-operators billing", {"aijobs-operators", "billing"}),
        ("[aijobs-operators]", {"aijobs-operators"}),
        ("aijobs-operators", {"aijobs-operators"}),
        ("[]", set()),
        ("", set()),
        (None, set()),
        ({"aijobs-operators": True}, set()),
    ],
)
def test_the_groups_claim_is_read_as_a_list_in_each_form_it_arrives(claim: Any, groups: set[str]) -> None:
    assert token_groups(claim) == groups


@pytest.mark.parametrize(
    "claim",
    [
        "[badminton-club]",
        "[tenant-42-admins]",
        "not-admin",
        "[admin]",
        ["admin", "administrators"],
        "[aijobs-operators-staging]",
        "[AIJOBS-OPERATORS]",
        "[xaijobs-operators]",
        '["aijobs-operators billing"]',
        "aijobs-operators:billing",
    ],
)
def test_look_alikes_of_the_operator_group_are_not_it(claim: Any) -> None:
    assert "aijobs-operators" not in token_groups(claim)
