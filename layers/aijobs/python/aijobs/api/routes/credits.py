"""`/credits`: your credit balance, grants and recent transactions."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Query

from aijobs.api.auth import principal
from aijobs.api.errors import responses
from aijobs.api.schemas import CreditsView
from aijobs.api.wiring import service

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.get(
    "/credits",
    summary="Your credit balance, grants and recent transactions",
    operation_id="getCredits",
    tags=["credits"],
    responses=responses(200, "your credits"),
)
def get_credits(limit: Annotated[int, Query(ge=1, le=100)] = 20) -> CreditsView:
    return service().credits(principal(router), limit=limit)
