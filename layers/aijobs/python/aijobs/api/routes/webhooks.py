"""`/webhooks/secret`: create, rotate and look up your webhook signing secret."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from aijobs.api.auth import principal
from aijobs.api.errors import responses
from aijobs.api.schemas import WebhookSecretIssued, WebhookSecretStatus
from aijobs.api.wiring import service

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.post(
    "/webhooks/secret",
    summary="Create or rotate your webhook signing secret (shown once)",
    operation_id="rotateWebhookSecret",
    tags=["webhooks"],
    responses=responses(
        201, "the new secret; a replaced one still signs deliveries for 24 hours", 409,
        model=WebhookSecretIssued,
    ),
)  # fmt: skip
def rotate_webhook_secret() -> Response[WebhookSecretIssued]:
    issued = service().rotate_webhook_secret(principal(router))
    body = WebhookSecretIssued(
        secret=issued.secret, createdAt=issued.created_at, previousExpiresAt=issued.previous_expires_at
    )
    # The secret is in this answer only: no cache may keep it.
    return Response(
        status_code=201, content_type=content_types.APPLICATION_JSON, body=body,
        headers={"Cache-Control": "no-store"},
    )  # fmt: skip


@router.get(
    "/webhooks/secret",
    summary="Whether you have a webhook signing secret (never the secret itself)",
    operation_id="getWebhookSecret",
    tags=["webhooks"],
    responses=responses(200, "whether a secret exists, and since when"),
)
def get_webhook_secret() -> WebhookSecretStatus:
    status = service().webhook_secret(principal(router))
    return WebhookSecretStatus(
        exists=status.exists, createdAt=status.created_at, previousExpiresAt=status.previous_expires_at
    )
