"""The stage dashboard graphs exactly the metrics the code emits, with the dimensions it emits them
with (aijobs.observability is the one source), plus the AWS metrics of every queue, function and
the API."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

import pytest

from aijobs import observability
from aijobs.observability import (
    METRIC_DIMENSIONS,
    METRIC_DURATION,
    METRICS_NAMESPACE,
    SERVICE_DIMENSION,
    service_name,
)
from aijobs_cdk.constructs.dead_letters import PARKING_SUFFIX
from aijobs_cdk.stage_config import queue_resource_name, resource_prefix
from tests.infra.alarm_reader import function_names, queue_id
from tests.infra.template import Synth

pytestmark = pytest.mark.infra

# Metrics the code defines but the dashboard leaves off on purpose (none today).
LEFT_OFF: set[str] = set()
_SEARCH = re.compile(r"""SEARCH\('\{([^}]*)\} MetricName="([^"]+)" (\w+)="([^"]+)"', '(\w+)', (\d+)\)""")


def _reference(token: Any) -> str:
    """A CloudFormation reference inside the body, as `Ref:<id>` / `GetAtt:<id>.<attribute>`."""
    if "Ref" in token:
        return f"Ref:{token['Ref']}"
    logical_id, attribute = token["Fn::GetAtt"]
    return f"GetAtt:{logical_id}.{attribute}"


def _body(synth: Synth) -> dict[str, Any]:
    (dashboard,) = synth.resources("AWS::CloudWatch::Dashboard").values()
    assert dashboard["Properties"]["DashboardName"] == resource_prefix(synth.config.stage)
    parts = dashboard["Properties"]["DashboardBody"]["Fn::Join"][1]
    body: dict[str, Any] = json.loads("".join(p if isinstance(p, str) else _reference(p) for p in parts))
    return body


class Graphed:
    """Every metric line of the dashboard, sorted by kind."""

    def __init__(self, synth: Synth) -> None:
        # (namespace, name) -> list of (dimensions, stat, widget title)
        self.metrics: dict[tuple[str, str], list[tuple[dict[str, str], str, str]]] = defaultdict(list)
        # name -> list of (dimension schema, service, stat)
        self.searches: dict[str, list[tuple[tuple[str, ...], str, str]]] = defaultdict(list)
        for widget in _body(synth)["widgets"]:
            if widget["type"] != "metric":
                continue
            title = widget["properties"]["title"]
            for line in widget["properties"]["metrics"]:
                options = line[-1] if isinstance(line[-1], dict) else {}
                if "expression" in options:
                    self._search(options["expression"])
                    continue
                namespace, name, *rest = [x for x in line if not isinstance(x, dict)]
                dimensions = dict(zip(rest[::2], rest[1::2], strict=True))
                self.metrics[(namespace, name)].append((dimensions, options["stat"], title))

    def _search(self, expression: str) -> None:
        match = _SEARCH.fullmatch(expression)
        assert match, f"not a SEARCH this test understands: {expression}"
        schema, name, key, value, stat, period = match.groups()
        namespace, *dimensions = schema.split(",")
        assert (namespace, key, period) == (METRICS_NAMESPACE, SERVICE_DIMENSION, "300")
        self.searches[name].append((tuple(dimensions), value, stat))

    def aijobs_names(self) -> set[str]:
        return {name for namespace, name in self.metrics if namespace == METRICS_NAMESPACE} | set(
            self.searches
        )


@pytest.fixture(scope="module")
def graphed(dev: Synth) -> Graphed:
    return Graphed(dev)


def _defined_metrics() -> set[str]:
    return {v for k, v in vars(observability).items() if k.startswith("METRIC_") and isinstance(v, str)}


def test_every_aijobs_metric_on_the_dashboard_is_one_the_code_emits(graphed: Graphed) -> None:
    assert graphed.aijobs_names() <= _defined_metrics()


def test_every_metric_the_code_emits_is_on_the_dashboard(graphed: Graphed) -> None:
    assert _defined_metrics() - graphed.aijobs_names() == LEFT_OFF


def test_each_metric_is_graphed_with_exactly_its_emitted_dimensions(dev: Synth, graphed: Graphed) -> None:
    service = service_name(dev.config.stage)
    for (namespace, name), lines in graphed.metrics.items():
        if namespace != METRICS_NAMESPACE:
            continue
        for dimensions, _stat, title in lines:
            assert set(dimensions) == {SERVICE_DIMENSION, *METRIC_DIMENSIONS[name]}, (name, title)
            assert dimensions[SERVICE_DIMENSION] == service
    for name, searches in graphed.searches.items():
        for schema, searched_service, _stat in searches:
            assert (SERVICE_DIMENSION, *METRIC_DIMENSIONS[name]) == tuple(schema), name
            assert searched_service == service


def test_per_kind_and_per_cron_metrics_cover_every_configured_kind_and_cron(
    dev: Synth, graphed: Graphed
) -> None:
    kinds = set(dev.config.queue_names)
    crons = {cron.text for cron in dev.config.crons}
    for (namespace, name), lines in graphed.metrics.items():
        if namespace != METRICS_NAMESPACE:
            continue
        declared = METRIC_DIMENSIONS[name]
        if "kind" in declared:
            assert {d["kind"] for d, _, _ in lines} == kinds, name
        if "cron" in declared:
            assert {d["cron"] for d, _, _ in lines} == crons, name


def test_job_duration_is_graphed_at_p50_and_p95(graphed: Graphed) -> None:
    stats = {stat for _, stat, _ in graphed.metrics[(METRICS_NAMESPACE, METRIC_DURATION)]}
    assert stats == {"p50", "p95"}


def test_retries_and_final_failures_are_broken_down_by_error_class(graphed: Graphed) -> None:
    for name in (observability.METRIC_RETRIED, observability.METRIC_FAILED_FINAL):
        (search,) = graphed.searches[name]
        assert "error_class" in search[0]


def test_queue_backlog_age_and_dead_letter_depth_of_every_queue(dev: Synth, graphed: Graphed) -> None:
    def graphed_queues(metric: str, title_part: str) -> set[str]:
        return {
            d["QueueName"]
            for d, _, title in graphed.metrics[("AWS/SQS", metric)]
            if title_part in title.lower()
        }

    stage = dev.config.stage
    main = {queue_id(dev, queue_resource_name(stage, kind)) for kind in dev.config.queue_names}
    dead = {queue_id(dev, queue_resource_name(stage, kind) + "-dlq") for kind in dev.config.queue_names}
    dead.add(queue_id(dev, resource_prefix(stage) + PARKING_SUFFIX))
    as_names = {f"GetAtt:{q}.QueueName" for q in main}
    assert graphed_queues("ApproximateNumberOfMessagesVisible", "backlog") == as_names
    assert graphed_queues("ApproximateAgeOfOldestMessage", "oldest") == as_names
    dead_lettered = graphed_queues("ApproximateNumberOfMessagesVisible", "dead-letter")
    assert {f"GetAtt:{q}.QueueName" for q in dead} < dead_lettered  # + the cron invocations' DLQ


def test_consumer_throttles_function_errors_and_api_traffic(dev: Synth, graphed: Graphed) -> None:
    names = function_names(dev)
    consumers = {
        f"Ref:{fn}"
        for fn, name in names.items()
        if name.endswith("-consumer") and name not in ("dlq-consumer", "webhook-consumer")
    }
    assert {d["FunctionName"] for d, _, _ in graphed.metrics[("AWS/Lambda", "Throttles")]} == consumers
    assert {d["FunctionName"] for d, _, _ in graphed.metrics[("AWS/Lambda", "Errors")]} == {
        f"Ref:{fn}" for fn in names
    }
    (api_id,) = dev.resources("AWS::ApiGatewayV2::Api")
    for metric in ("Count", "4xx", "5xx"):
        (line,) = graphed.metrics[("AWS/ApiGateway", metric)]
        assert line[0] == {"ApiId": f"Ref:{api_id}", "Stage": "$default"}
        assert line[1] == "Sum"
