"""`/classify`: a short text classified synchronously (no queue)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Header

from aijobs.api.auth import principal
from aijobs.api.errors import responses
from aijobs.api.schemas import ClassifyRequest, ClassifyResponse
from aijobs.api.submission import IDEMPOTENCY_KEY_PATTERN
from aijobs.api.wiring import service

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.post(
    "/classify",
    summary="Classify a short text synchronously (no queue); each call costs classify's price",
    operation_id="classify",
    tags=["classify"],
    responses=responses(
        200,
        "the label, charged (or the same answer again, not charged again, for a replayed Idempotency-Key)",
        400, 402, 409, 413, 415, 429, 503,
        model=ClassifyResponse,
    ),
)  # fmt: skip
def classify(
    body: ClassifyRequest,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN}),
    ] = None,
) -> Response[ClassifyResponse]:
    svc = service()
    job, replayed = svc.classify(principal(router), body, idempotency_key)
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=svc.classify_view(job),
        headers=headers,
    )
