"""The operator console in headless Chromium against a real local stack (docs/operations/console.md).

Debian's `chromium` driven by Playwright for Python (`executable_path`; Playwright's own browser
download is never used). `make test` installs the browser when apt can; without one these tests
skip, saying what is missing. Screenshots go to `.artifacts/console/`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aijobs_cli.local.stack import LocalStack
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts" / "console"
# Input that would run if the page ever parsed job data as HTML.
HOSTILE = '#outage <img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def _chromium() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set CHROMIUM=/path/to/chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -r requirements/dev.txt)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_local_stack(tmp_path_factory.mktemp("console")) as local:
        yield local


@pytest.fixture
def page(browser: Any, stack: LocalStack) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    problems: list[str] = []
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.problems = problems
    opened.set_default_timeout(60_000)  # each wait ends as soon as the page shows it: this is a hang guard
    yield opened
    context.close()


def _login(page: Any, stack: LocalStack, key: str) -> None:
    page.goto(f"{stack.api_url}/console")
    page.fill("#key", key)
    page.keyboard.press("Enter")  # the form works from the keyboard


def _wait_status(
    client: Target, job_id: str, wanted: tuple[str, ...], timeout: float = 60, *, dead_letter: bool = True
) -> Any:
    """Poll until the job is in one of `wanted` (a `failed_final` one also dead-lettered, unless not
    `dead_letter`: a permanent failure never reaches the DLQ)."""
    deadline = time.monotonic() + timeout
    job: Any = None
    while time.monotonic() < deadline:
        job = client.request("GET", f"/jobs/{job_id}").body
        settled = job["status"] != "failed_final" or job["deadLettered"] or not dead_letter
        if job["status"] in wanted and settled:
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not reach {wanted}: {job}")


def test_operator_reruns_a_dead_letter_and_watches_it_succeed(page: Any, stack: LocalStack) -> None:
    assert stack.info_file is not None
    client = Target.from_info_file(stack.info_file)
    submitted = client.request("POST", "/jobs", {"kind": "summary", "input": HOSTILE})
    assert submitted.status == 202, submitted.body
    job_id = submitted.body["jobId"]
    _wait_status(client, job_id, ("failed_final",))  # dead-lettered after its retries

    _login(page, stack, stack.admin_key)
    row = page.locator(f"#dead-letters tr[data-job='{job_id}']")
    row.wait_for()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dead-letter.png"), full_page=True)
    assert "provider" in row.locator("td.error").inner_text()
    assert row.locator("td.resolution").inner_text() == "open"
    open_letters = page.locator("#kinds tr[data-kind='summary'] td.dead-letters")
    before = int(open_letters.inner_text())
    assert before >= 1

    # The job's detail shows its input as text, and its attempts.
    row.locator("button.job").click()
    page.locator("#detail:not([hidden])").wait_for()
    detail = page.locator("#detail-fields").inner_text()
    assert HOSTILE in detail
    # What it was charged and what its attempts used: a dead-lettered job was refunded.
    assert "refunded" in detail
    assert "Credits" in detail
    assert page.locator("#timeline li").count() >= 2
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#detail img, #detail script").count() == 0

    # The fault is "fixed" (`#outage` fails only until a re-run): re-run, confirm, the row updates.
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.rerun").click()
    page.locator(f"#dead-letters tr[data-job='{job_id}'] .job-status", has_text="queued").wait_for()
    assert row.locator("td.resolution").inner_text() == "rerunning"
    assert _wait_status(client, job_id, ("succeeded",))["attempts"] == 1
    page.click("#refresh")
    page.locator(f"#jobs tr[data-job='{job_id}']", has_text="succeeded").wait_for()
    # Resolved: off the open list, the count goes down; "Show resolved" shows what became of it.
    row.wait_for(state="detached")
    assert int(open_letters.inner_text()) == before - 1
    page.check("#show-resolved")
    resolved = page.locator(f"#dead-letters tr[data-job='{job_id}'][data-resolution='succeeded']")
    resolved.wait_for()
    assert resolved.locator(".job-status").inner_text() == "succeeded"
    assert resolved.locator("button.rerun").count() == 0
    page.screenshot(path=str(ARTIFACTS / "after-rerun.png"), full_page=True)

    # Filters live in the URL, and the key never does.
    page.select_option("#filters select[name=status]", "succeeded")
    page.click("#filters button[type=submit]")
    page.wait_for_url("**/console?status=succeeded")
    assert stack.admin_key not in page.url
    assert page.evaluate("sessionStorage.getItem('aijobs.operatorKey')") == stack.admin_key
    assert page.problems == []


def test_a_user_key_is_refused(page: Any, stack: LocalStack) -> None:
    _login(page, stack, stack.api_key)
    page.locator("#status", has_text="not an operator key").wait_for()
    assert page.locator("#login").is_visible()
    assert not page.locator("#app").is_visible()
    assert page.evaluate("sessionStorage.getItem('aijobs.operatorKey')") is None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "refused.png"))


def test_batch_rerun_counts_first_and_tenant_credits_show(page: Any, stack: LocalStack) -> None:
    """From the keyboard: count a kind's failed jobs, confirm the re-run; look up a tenant's credits,
    and a hostile tenant id comes back as text."""
    assert stack.info_file is not None
    client = Target.from_info_file(stack.info_file)
    submitted = client.request("POST", "/jobs", {"kind": "summary", "input": "#fail:400 refused for good"})
    assert submitted.status == 202, submitted.body
    job_id = submitted.body["jobId"]
    _wait_status(client, job_id, ("failed_final",), dead_letter=False)

    _login(page, stack, stack.admin_key)
    page.locator("#batch select[name=kind] option", has_text="summary").wait_for(state="attached")
    page.select_option("#batch select[name=kind]", "summary")
    page.fill("#batch input[name=errorClass]", "invalid_input")
    page.keyboard.press("Enter")  # counts: a dry run, nothing re-run yet
    page.locator("#batch-result", has_text="1 failed_final summary job(s) match.").wait_for()
    assert "Left alone" not in page.locator("#batch-result").inner_text()
    assert _job_reruns(client, stack, job_id) == 0
    confirm = page.locator("#batch-confirm")
    assert confirm.is_visible()
    assert confirm.evaluate("node => node === document.activeElement")  # Enter confirms next
    page.once("dialog", lambda dialog: dialog.accept())
    page.keyboard.press("Enter")
    page.locator("#batch-result", has_text="Re-ran 1 job(s)").wait_for()
    assert _job_reruns(client, stack, job_id) == 1
    assert not confirm.is_visible()  # one confirmation, one re-run

    page.fill("#credits-form input[name=tenant]", "demo")
    page.keyboard.press("Enter")
    page.locator("#credits-balance", has_text="credits").wait_for()
    assert page.locator("#credit-grants tbody tr").count() >= 1
    assert page.locator("#credit-transactions tbody tr", has_text="debit").count() >= 1
    # The local stage counts no spend (no cap): the table says so rather than showing nothing.
    assert "not counted" in page.locator("#credit-spend tbody").inner_text()
    hostile = '<img src=x onerror="window.__pwned=3">'
    page.fill("#credits-form input[name=tenant]", hostile)
    page.keyboard.press("Enter")
    page.locator("#status", has_text=f"No tenant {hostile}.").wait_for()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#status img").count() == 0
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "batch-and-credits.png"), full_page=True)
    # Chromium logs every refused fetch; the unknown tenant's 404 is the one expected here.
    assert [p for p in page.problems if "status of 404" not in p] == []
    assert len(page.problems) <= 1


def _job_reruns(client: Target, stack: LocalStack, job_id: str) -> int:
    """The job's re-run count, as an operator sees it (the demo user's own view does not show it)."""
    answer = client.request(
        "GET", f"/admin/jobs/demo/{job_id}", headers={"Authorization": f"Bearer {stack.admin_key}"}
    )
    assert answer.status == 200, answer.body
    return int(answer.body["reruns"])
