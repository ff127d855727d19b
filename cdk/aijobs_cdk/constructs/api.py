"""The public HTTP API: an API Gateway HTTP API whose routes all reach the producer function."""

from __future__ import annotations

import jsii
from aws_cdk import aws_apigateway as apigw_rest
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from aijobs_cdk.constructs.lambda_defaults import log_retention
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import StageConfig

# One JSON line per request in the access log: enough to trace a request to the function's logs.
ACCESS_LOG_FORMAT = (
    '{"requestId":"$context.requestId","ip":"$context.identity.sourceIp",'
    '"requestTime":"$context.requestTime","method":"$context.httpMethod",'
    '"routeKey":"$context.routeKey","status":"$context.status",'
    '"responseLength":"$context.responseLength","latencyMs":"$context.responseLatency",'
    '"integrationError":"$context.integrationErrorMessage"}'
)


@jsii.implements(apigw.IAccessLogSettings)
class _AccessLogSettings:
    def __init__(self, destination: apigw.IAccessLogDestination) -> None:
        self._destination = destination

    @property
    def destination(self) -> apigw.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw_rest.AccessLogFormat:
        return apigw_rest.AccessLogFormat.custom(ACCESS_LOG_FORMAT)


class Api(Construct):
    """HTTP API -> producer. Routing happens in the function (powertools resolver).

    Authentication hook: by default the producer checks `Authorization: Bearer <api key>` against
    hashed keys in the meta table. Pass `authorizer` (for example an `HttpJwtAuthorizer` for a
    Cognito user pool) to authenticate at the gateway instead; see docs/concepts/api.md, "Cognito
    instead of API keys".
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        producer: lambda_.IFunction,
        authorizer: apigw.IHttpRouteAuthorizer | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.http_api = apigw.HttpApi(
            self,
            "HttpApi",
            api_name=f"aijobs-{config.stage}",
            create_default_stage=False,
            default_integration=integrations.HttpLambdaIntegration("Producer", producer),
            default_authorizer=authorizer,
        )
        access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention(config.log_retention_days))
        self.stage = apigw.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigw.ThrottleSettings(
                rate_limit=config.api_throttle_rate, burst_limit=config.api_throttle_burst
            ),
            access_log_settings=_AccessLogSettings(apigw.LogGroupLogDestination(access_logs)),
        )
        if authorizer is None:
            acknowledge(
                self.http_api,
                "AwsSolutions-APIG4",
                "The producer authenticates every request (hashed API keys in the meta "
                "table, 401 otherwise); pass `authorizer` to move authentication to the gateway",
            )

    @property
    def url(self) -> str:
        url = self.stage.url
        assert url is not None
        return url
