"""EventBridge Scheduler schedules generated from `CRONS`, all invoking the one cron dispatcher."""

from __future__ import annotations

from aws_cdk import Duration, TimeZone
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

# Payload keys the dispatcher reads: `cron` is the exact CRONS entry (the SCHEDULED_HANDLERS key).
from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_EXECUTION_ID, PAYLOAD_SCHEDULED_TIME
from aijobs.stage_config import StageConfig
from aijobs_cdk.nag import acknowledge, logical_id


class Schedules(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: StageConfig, dispatcher: lambda_.Function
    ) -> None:
        super().__init__(scope, construct_id)
        self.schedules: list[scheduler.Schedule] = []
        if not config.crons:
            return
        group = scheduler.ScheduleGroup(self, "Group", schedule_group_name=f"aijobs-{config.stage}")
        role = iam.Role(self, "InvokeRole", assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"))
        acknowledge(
            role,
            f"AwsSolutions-IAM5[Resource::<{logical_id(dispatcher)}.Arn>:*]",
            "grant_invoke covers the dispatcher's own versions and aliases ('<arn>:*'), no other function",
        )
        for index, cron in enumerate(config.crons):
            target = targets.LambdaInvoke(
                dispatcher,
                input=scheduler.ScheduleTargetInput.from_object(
                    {
                        PAYLOAD_CRON: cron.text,
                        PAYLOAD_SCHEDULED_TIME: scheduler.ContextAttribute.scheduled_time,
                        PAYLOAD_EXECUTION_ID: scheduler.ContextAttribute.execution_id,
                    }
                ),
                role=role,
                retry_attempts=2,
                max_event_age=Duration.minutes(5),
            )
            self.schedules.append(
                scheduler.Schedule(
                    self,
                    f"Cron{index}",
                    schedule_group=group,
                    description=f"aijobs cron '{cron.text}'",
                    schedule=scheduler.ScheduleExpression.expression(cron.to_aws(), TimeZone.ETC_UTC),
                    target=target,
                )
            )
