"""EventBridge Scheduler schedules generated from `CRONS`, all invoking the one cron dispatcher.

Two hops can fail before the dispatcher's own alerting runs, and both end in one dead-letter
queue (alarmed by the Alerts construct):
- delivery: Scheduler invokes Lambda asynchronously; a rejected invoke (throttled, function
  missing, no permission) is retried by Scheduler's retry policy, then dead-lettered;
- the invocation: an accepted event whose run crashes (import error, timeout, out of memory) is
  retried by Lambda's asynchronous-invoke retries, then sent to the same queue (on-failure
  destination). A run that fails inside the handler is not a crash: the dispatcher records,
  counts and alerts it (once per incident) and returns normally, so it is neither retried here
  nor dead-lettered.
"""

from __future__ import annotations

from aws_cdk import Duration, TimeZone
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from aws_cdk import aws_sqs as sqs
from constructs import Construct

# Payload keys the dispatcher reads: `cron` is the exact CRONS entry (the SCHEDULED_HANDLERS key).
from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_EXECUTION_ID, PAYLOAD_SCHEDULED_TIME
from aijobs_cdk.constructs.naming import stage_queue
from aijobs_cdk.nag import acknowledge, logical_id
from aijobs_cdk.stage_config import CRON_DEAD_LETTER_QUEUE, StageConfig, resource_prefix

# Scheduler -> Lambda delivery: a few tries within minutes; a firing older than the shortest cron
# interval is not worth delivering late (the next firing does the same work).
DELIVERY_RETRY_ATTEMPTS = 2
DELIVERY_MAX_EVENT_AGE = Duration.minutes(5)
# A crashed invocation: Lambda retries after about 1 and 3 minutes. A retry of a run that timed
# out finds the run's claim still held (aijobs.store.cron_runs) and skips as a duplicate; the
# function's Errors alarm reports that case.
INVOKE_RETRY_ATTEMPTS = 2
INVOKE_MAX_EVENT_AGE = Duration.minutes(30)
DEAD_LETTER_RETENTION = Duration.days(14)
DEAD_LETTER_SUFFIX = "-" + CRON_DEAD_LETTER_QUEUE


class Schedules(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: StageConfig, dispatcher: lambda_.Function
    ) -> None:
        super().__init__(scope, construct_id)
        self.schedules: list[scheduler.Schedule] = []
        self.dead_letter_queue: sqs.Queue | None = None
        if not config.crons:
            # Nothing invokes the dispatcher asynchronously; an operator's run is synchronous.
            dispatcher.configure_async_invoke(retry_attempts=0)
            return
        self.dead_letter_queue = stage_queue(
            self,
            "DeadLetters",
            config=config,
            name=resource_prefix(config.stage) + DEAD_LETTER_SUFFIX,
            retention_period=DEAD_LETTER_RETENTION,
        )
        acknowledge(
            self.dead_letter_queue,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the schedules and the dispatcher",
        )
        dispatcher.configure_async_invoke(
            retry_attempts=INVOKE_RETRY_ATTEMPTS,
            max_event_age=INVOKE_MAX_EVENT_AGE,
            on_failure=destinations.SqsDestination(self.dead_letter_queue),
        )
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
                retry_attempts=DELIVERY_RETRY_ATTEMPTS,
                max_event_age=DELIVERY_MAX_EVENT_AGE,
                # The target grants the role sqs:SendMessage on this queue.
                dead_letter_queue=self.dead_letter_queue,
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
