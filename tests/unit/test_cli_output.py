"""What the CLI tells a script: exit codes for how a waited-for job ended, JSON or readable text
(never a Python dict) on stdout, ids whole in every table, and the kinds when a kind is unknown.

The API is a scripted stand-in behind a real `Target` (no stack): each test says what it answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from aijobs_cli.commands import _common, accounts, demo, jobs, operator, soak, spend
from aijobs_cli.main import app
from aijobs_cli.target import ApiResponse, Target

JOB = "01M8MTKH5537ZRM1P4SGCFN1A8"
CHILD = f"{JOB}.00003"
KINDS = {"summary": "q-summary", "image-generate": "q-image"}
Answer = Callable[[str, str, Any], ApiResponse]


@pytest.fixture
def calls() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, calls: list[tuple[str, str]]) -> Callable[[Answer], None]:
    """`api(answer)`: every CLI command talks to a local-stage Target whose requests `answer`."""
    target = Target(stage="local", api_url="http://127.0.0.1:1", api_key="k", queue_urls=dict(KINDS))

    def install(answer: Answer) -> None:
        def request(method: str, path: str, body: Any = None, headers: Any = None) -> ApiResponse:
            calls.append((method, path))
            return answer(method, path, body)

        target.request = request  # type: ignore[method-assign]

    for module in (accounts, demo, jobs, operator, soak, spend):  # each command module's own name
        monkeypatch.setattr(module, "_target", lambda *_args, **_kwargs: target)
    return install


def _job(status: str, **fields: Any) -> dict[str, Any]:
    return {
        "jobId": JOB, "kind": "summary", "status": status, "attempts": 1,
        "createdAt": "2026-12-01T10:00:00+00:00", **fields,
    }  # fmt: skip


def _submit_then(view: dict[str, Any]) -> Answer:
    def answer(method: str, path: str, _body: Any) -> ApiResponse:
        if method == "POST":
            return ApiResponse(202, {"jobId": JOB, "status": "queued"})
        return ApiResponse(200, view)

    return answer


@pytest.mark.parametrize(
    ("view", "code"),
    [
        (_job("succeeded", finishedAt="2026-12-01T10:00:02+00:00"), 0),
        (_job("failed_final", lastErrorClass="permanent", lastErrorMessage="400 from the model"), 4),
        (_job("failed_final", lastErrorClass="transient", deadLettered=True), 4),
        (_job("failed_final", lastErrorClass="cancelled", lastErrorMessage="cancelled by its owner"), 5),
        (_job("running"), 3),
        (_job("failed_retryable", lastErrorClass="transient"), 3),
    ],
    ids=["succeeded", "failed", "dead-lettered", "cancelled", "running", "retrying"],
)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_submit_wait_exits_with_how_the_job_ended(
    api: Callable[[Answer], None], view: dict[str, Any], code: int, as_json: bool
) -> None:
    api(_submit_then(view))
    # --timeout 0: one look at the job, no long-poll (an unfinished job is a timed-out wait).
    args = ["submit", "summary", "text", "--wait", "--timeout", "0", *(["--json"] if as_json else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, result.output
    if as_json:
        assert json.loads(result.stdout) == view
    else:
        assert result.stdout == f"{JOB}  {view['status']}\n"
    if code == 3:
        assert f"still {view['status']} after 0 s: aijobs status {JOB}" in result.stderr
    elif code:
        assert view["lastErrorClass"] in result.stderr


def test_submit_without_wait_exits_0_for_an_accepted_job(api: Callable[[Answer], None]) -> None:
    api(_submit_then(_job("failed_final")))
    result = CliRunner().invoke(app, ["submit", "summary", "text"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{JOB}  queued\n"


def test_exit_codes_leave_click_its_own(api: Callable[[Answer], None]) -> None:
    """1 (an error) and 2 (a usage error) are click's; the job-end codes are others."""
    assert {_common.EXIT_ERROR, _common.EXIT_USAGE} == {1, 2}
    assert len({1, 2, _common.EXIT_TIMED_OUT, _common.EXIT_FAILED, _common.EXIT_CANCELLED}) == 5
    api(_submit_then(_job("succeeded")))
    assert CliRunner().invoke(app, ["submit", "summary", "text", "--no-such-option"]).exit_code == 2


def test_a_refusal_is_2_and_a_server_error_1(api: Callable[[Answer], None]) -> None:
    api(lambda *_: ApiResponse(409, {"code": "job_finished", "message": "the job has finished"}))
    refused = CliRunner().invoke(app, ["cancel", JOB])
    assert refused.exit_code == 2, refused.output
    assert "409 job_finished: the job has finished" in refused.stderr
    api(lambda *_: ApiResponse(503, {"code": "unavailable", "message": "try again"}))
    failed = CliRunner().invoke(app, ["cancel", JOB])
    assert failed.exit_code == 1, failed.output
    assert "503 unavailable" in failed.stderr


def test_an_unknown_kind_lists_the_kinds_before_anything_is_uploaded(
    api: Callable[[Answer], None], calls: list[tuple[str, str]], tmp_path: Any
) -> None:
    api(_submit_then(_job("succeeded")))
    notes = tmp_path / "notes.txt"
    notes.write_text("some text")
    for args in (["submit", "sumary", "text"], ["submit", "sumary", "--file", str(notes)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "unknown kind 'sumary'; kinds: summary, image-generate" in result.stderr
    assert calls == []


def test_an_unknown_kind_lists_the_kinds_the_api_names(api: Callable[[Answer], None]) -> None:
    """A deployed stage's target knows no kinds: the API's 422 carries them (`details.kinds`)."""
    jobs._target(None).queue_urls.clear()  # type: ignore[attr-defined]  # the fixture's target
    api(
        lambda *_: ApiResponse(
            422,
            {
                "code": "unknown_kind",
                "message": "unknown kind 'sumary'",
                "details": {"kinds": ["summary", "ocr"]},
            },
        )
    )
    result = CliRunner().invoke(app, ["submit", "sumary", "text"])
    assert result.exit_code == 2, result.output
    assert "422 unknown_kind: unknown kind 'sumary'; kinds: summary, ocr" in result.stderr


def test_the_job_list_keeps_ids_kinds_and_statuses_whole(api: Callable[[Answer], None]) -> None:
    """At the 80 columns a pipe gets, rich would cut them to `01M8MTKH55…`."""
    jobs = [
        _job("failed_retryable", jobId=CHILD, kind="image-generate", lastErrorClass="model_unavailable"),
        _job("succeeded"),
    ]
    api(lambda *_: ApiResponse(200, {"jobs": jobs, "nextCursor": None}))
    result = CliRunner().invoke(app, ["list"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for value in (CHILD, JOB, "image-generate", "failed_retryable"):
        assert value in result.stdout.split(), value


def test_children_keep_their_ids_whole(api: Callable[[Answer], None]) -> None:
    children = [
        _job("failed_final", jobId=f"{JOB}.{part:05d}", part=part, lastErrorClass="invalid_input_at_length",
             finishedAt="2026-12-01T10:00:02.123456+00:00")
        for part in range(3)
    ]  # fmt: skip
    api(lambda *_: ApiResponse(200, {"jobs": children, "nextCursor": None}))
    result = CliRunner().invoke(app, ["children", JOB])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    assert all(child["jobId"] in result.stdout.split() for child in children)


class _Operator:
    def rerun(self, user: str, job_id: str) -> Any:
        return SimpleNamespace(
            job_id=job_id, status=SimpleNamespace(value="queued"), reruns=1,
            previous_error_class="transient", charge_waived=True,
        )  # fmt: skip

    def fail_final(self, user: str, job_id: str, reason: str) -> Any:
        return SimpleNamespace(
            job_id=job_id, status=SimpleNamespace(value="failed_final"), charge_state="refunded"
        )

    def rerun_batch(self, kind: str, *, dry_run: bool, **_: Any) -> Any:
        return SimpleNamespace(
            matched=2, rerun=[] if dry_run else [JOB, CHILD], skipped=[], dry_run=dry_run,
            left_alone={"cancelled": 3}, waived=[] if dry_run else [JOB],
        )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (
            ["rerun", JOB, "--user", "alice"],
            f"{JOB}  queued  (re-run 1, previous error transient, not charged again)\n",
        ),
        (["fail-final", JOB, "--user", "alice"], f"{JOB}  failed_final  (charge refunded)\n"),
        (
            ["redrive", "--kind", "summary"],
            "dry run: 2 job(s) match; --execute re-runs them\nleft alone: 3 cancelled\n",
        ),
        (
            ["redrive", "--kind", "summary", "--execute"],
            "2 matched, 2 re-run, 0 skipped\n"
            "left alone: 3 cancelled\n"
            f"re-run: {JOB}  (not charged again)\nre-run: {CHILD}\n",
        ),
    ],
    ids=["rerun", "fail-final", "redrive", "redrive-execute"],
)
def test_operator_actions_print_text_or_json_never_a_dict(
    api: Callable[[Answer], None], monkeypatch: pytest.MonkeyPatch, args: list[str], text: str
) -> None:
    monkeypatch.setattr(Target, "operator", lambda _self: _Operator())
    api(lambda *_: ApiResponse(500, None))
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == text
    as_json = CliRunner().invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert isinstance(json.loads(as_json.stdout), dict)


def test_demo_prints_its_outcomes_as_text_and_every_job_id_whole(
    api: Callable[[Answer], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    submitted: list[str] = []

    def answer(method: str, path: str, body: Any) -> ApiResponse:
        if method == "POST":
            submitted.append(f"{JOB[:-2]}{len(submitted):02d}")
            return ApiResponse(202, {"jobId": submitted[-1], "status": "queued"})
        job_id = path.rsplit("/", 1)[1]
        failed = submitted.index(job_id) == 0
        return ApiResponse(
            200,
            _job("failed_final" if failed else "succeeded", jobId=job_id, deadLettered=failed,
                 finishedAt="2026-12-01T10:00:02+00:00"),
        )  # fmt: skip

    api(answer)
    result = CliRunner().invoke(app, ["demo", "--no-report"])
    assert result.exit_code == 0, result.output
    assert len(submitted) == 7  # the mix's summary and image-generate jobs: the stage's kinds here
    assert "outcomes: 6 succeeded, 1 dead-lettered   p50 2.0 s   p95 2.0 s" in result.stdout
    assert "{" not in result.stdout
    assert all(job_id in result.stdout.split() for job_id in submitted)
    submitted.clear()
    shown = CliRunner().invoke(app, ["demo", "--no-report", "--json"])
    assert json.loads(shown.stdout)["outcomes"] == {"succeeded": 6, "dead-lettered": 1}


def test_credits_show_prints_text_or_the_api_s_json(api: Callable[[Answer], None]) -> None:
    body = {
        "balance": 9_990,
        "grants": [{"grantId": "01M8MTKH5537ZRM1P4SGCFN1G0", "amount": 10_000, "remaining": 9_990,
                    "expiresAt": "2026-12-31T00:00:00+00:00", "expired": False}],
        "transactions": [{"txId": "t1", "type": "debit", "amount": -10, "jobId": CHILD,
                          "createdAt": "2026-12-01T10:00:00+00:00"}],
        "prices": {"summary": 10, "image-generate": 40},
        "spendCounted": True,
        "spendByDay": [{"day": "2026-12-01", "usd": 0.0123}],
    }  # fmt: skip
    api(lambda *_: ApiResponse(200, body))
    shown = CliRunner().invoke(app, ["credits", "show"])
    assert shown.exit_code == 0, shown.output
    assert "{" not in shown.stdout
    assert "balance: 9990 credits" in shown.stdout
    assert {"01M8MTKH5537ZRM1P4SGCFN1G0", CHILD} <= set(shown.stdout.split())
    assert "prices (credits per job): image-generate 40, summary 10" in shown.stdout
    assert "model spend by day: 2026-12-01 $0.01" in shown.stdout
    as_json = CliRunner().invoke(app, ["credits", "show", "--json"])
    assert json.loads(as_json.stdout) == body


def test_the_dev_banner_long_polls_and_names_the_keys_and_the_console(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pathlib import Path

    from aijobs_cli.commands import local

    stack = SimpleNamespace(
        api_key="aj_user", admin_key="aj_admin", api_url="http://127.0.0.1:8080",
        endpoint_url="http://127.0.0.1:5000", info=lambda: {"demo_user": "demo"},
    )  # fmt: skip
    config = SimpleNamespace(stage="local", queue_names=("summary",))
    local._print_banner(stack, config, Path(".aijobs/local.json"))  # type: ignore[arg-type]
    printed = capsys.readouterr().out
    # The job's status is one long-poll (answered when the job is done), not a polling loop.
    assert (
        'curl -s "http://127.0.0.1:8080/jobs/<jobId>?wait=20" -H "Authorization: Bearer aj_user"' in printed
    )
    assert "aj_admin" in printed
    # The console's address is in the banner, with the key it takes.
    assert "http://127.0.0.1:8080/console   (sign in with the admin key)" in printed
