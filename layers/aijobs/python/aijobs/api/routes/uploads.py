"""`/uploads`: a presigned form to upload a job's input."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from aijobs.api.auth import principal
from aijobs.api.errors import responses
from aijobs.api.schemas import PresignedUpload, UploadRequest
from aijobs.api.wiring import service

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.post(
    "/uploads",
    summary="Get a presigned form to upload a job input",
    operation_id="createUpload",
    tags=["uploads"],
    responses=responses(
        201,
        "upload the file with this form, then submit a job with its `inputRef`",
        400, 413, 415,
        model=PresignedUpload,
    ),
)  # fmt: skip
def create_upload(body: UploadRequest) -> Response[PresignedUpload]:
    upload = service().create_upload(principal(router), body)
    return Response(status_code=201, content_type=content_types.APPLICATION_JSON, body=upload)
