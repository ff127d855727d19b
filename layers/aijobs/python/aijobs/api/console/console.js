// The aijobs operator console: plain DOM, text set with textContent only (nothing a job holds
// is ever parsed as HTML), the key in this tab's sessionStorage and sent only as a header.
"use strict";

const KEY_SLOT = "aijobs.operatorKey";
const FILTERS = ["kind", "status", "errorClass", "tenant", "since", "until"];
const SVG = "http://www.w3.org/2000/svg";
let nextCursor = null;
// The last dry run's request: the confirm button sends exactly it again, for real.
let batchPlan = null;

const $ = (id) => document.getElementById(id);

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}

function say(text) { $("status").textContent = text || ""; }

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${sessionStorage.getItem(KEY_SLOT) || ""}` };
  const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 120) return `${seconds}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  return `${Math.round(seconds / 3600)}h`;
}

function when(text) { return text ? new Date(text).toLocaleString() : "-"; }

function chart(hours) {
  const width = 120, height = 28, gap = 2;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "chart");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  const top = Math.max(1, ...hours.map((h) => h.succeeded + h.failed));
  const bar = width / hours.length - gap;
  const title = document.createElementNS(SVG, "title");
  title.textContent = hours.map((h) => `${new Date(h.hour).getHours()}h: ${h.succeeded} ok, ${h.failed} failed`).join("; ");
  svg.appendChild(title);
  hours.forEach((h, i) => {
    let y = height;
    for (const [count, cls] of [[h.succeeded, "ok"], [h.failed, "bad"]]) {
      const tall = (count / top) * height;
      y -= tall;
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("class", cls);
      rect.setAttribute("x", String(i * (bar + gap)));
      rect.setAttribute("y", String(y));
      rect.setAttribute("width", String(bar));
      rect.setAttribute("height", String(tall));
      svg.appendChild(rect);
    }
  });
  return svg;
}

function jobButton(userId, jobId) {
  const button = el("button", jobId, { type: "button", class: "job" });
  button.addEventListener("click", () => showJob(userId, jobId));
  return button;
}

async function loadOverview() {
  const [overview, spend] = await Promise.all([api("GET", "/admin/overview"), api("GET", "/admin/spend")]);
  const body = $("kinds").tBodies[0];
  body.replaceChildren();
  const kindSelect = $("filters").elements.kind;
  const chosen = kindSelect.value;
  kindSelect.replaceChildren(el("option", "any", { value: "" }));
  const batchKind = $("batch").elements.kind;
  const batchChosen = batchKind.value;
  batchKind.replaceChildren();
  for (const kind of overview.kinds) {
    kindSelect.appendChild(el("option", kind.kind));
    batchKind.appendChild(el("option", kind.kind));
    const row = el("tr", null, { "data-kind": kind.kind });
    row.append(el("td", kind.kind), el("td", kind.backlog), el("td", age(kind.oldestQueuedAgeSeconds)),
      el("td", kind.succeededLastHour), el("td", kind.failedLastHour),
      el("td", kind.deadLetters, { class: "dead-letters" }));
    const consumer = el("td");
    if (kind.paused === null) {
      consumer.textContent = "unknown";
    } else {
      consumer.appendChild(el("span", kind.paused ? "paused " : "running ", { class: kind.paused ? "paused" : "ok" }));
      const toggle = el("button", kind.paused ? "Resume" : "Pause", { type: "button" });
      toggle.addEventListener("click", () => act(`${kind.paused ? "Resume" : "Pause"} the ${kind.kind} consumer?`,
        "POST", `/admin/kinds/${encodeURIComponent(kind.kind)}/${kind.paused ? "resume" : "pause"}`));
      consumer.appendChild(toggle);
    }
    const drawing = el("td");
    drawing.appendChild(chart(kind.hours));
    row.append(consumer, drawing);
    body.appendChild(row);
  }
  kindSelect.value = chosen;
  if (batchChosen) batchKind.value = batchChosen;
  $("spend").textContent = spend.counted
    ? `Model spend today (${spend.day}, ${spend.timeZone}): ${spend.usd} USD`
    : "Model spend is not counted on this stage (the spend brake is off).";
}

// Open dead letters only, unless "Show resolved" is ticked: each with its job's status now.
async function loadDeadLetters() {
  const all = $("show-resolved").checked ? "&all=true" : "";
  const data = await api("GET", `/admin/dead-letters?limit=50${all}`);
  const body = $("dead-letters").tBodies[0];
  body.replaceChildren();
  for (const letter of data.deadLetters) {
    const row = el("tr", null, { "data-job": letter.jobId, "data-resolution": letter.resolution });
    const job = el("td");
    job.appendChild(letter.userId ? jobButton(letter.userId, letter.jobId) : el("span", letter.jobId));
    const error = el("td", `${letter.lastErrorClass || "-"}: ${letter.lastErrorMessage || ""}`, { class: "error" });
    const status = el("td", letter.jobStatus || "-", { class: "job-status" });
    const resolution = el("td", letter.resolution.replaceAll("_", " "), { class: "resolution" });
    row.append(job, el("td", letter.kind), el("td", letter.userId || "-"), error,
      el("td", when(letter.deadLetteredAt)), status, resolution);
    const actions = el("td");
    if (letter.userId && !letter.resolved) {
      const base = `/admin/jobs/${encodeURIComponent(letter.userId)}/${encodeURIComponent(letter.jobId)}`;
      const rerun = el("button", "Re-run", { type: "button", class: "rerun" });
      rerun.addEventListener("click", () => rowAction(`Re-run job ${letter.jobId}?`, base + "/rerun", undefined,
        status, resolution, "rerunning"));
      const fail = el("button", "Fail final", { type: "button", class: "fail-final" });
      fail.addEventListener("click", () => rowAction(`Mark job ${letter.jobId} failed_final for good?`,
        base + "/fail-final", { reason: "given up by an operator (console)" }, status, resolution, "failed by operator"));
      actions.append(rerun, fail);
    }
    row.appendChild(actions);
    body.appendChild(row);
  }
  if (!data.deadLetters.length) {
    emptyRow(body, all ? "No dead letters." : "No open dead letters.", 8);
  }
}

// The row shows the action's outcome; the list itself follows on the next refresh.
async function rowAction(question, path, body, statusCell, resolutionCell, resolution) {
  if (!window.confirm(question)) return;
  try {
    const job = await api("POST", path, body);
    statusCell.textContent = job.status;
    resolutionCell.textContent = resolution;
    say(`Job ${job.jobId} is now ${job.status}.`);
    await loadOverview();  // the open count
  } catch (error) {
    say(`Refused: ${error.message}`);
  }
}

async function act(question, method, path) {
  if (!window.confirm(question)) return;
  try {
    await api(method, path);
    await loadOverview();
  } catch (error) {
    say(`Refused: ${error.message}`);
  }
}

function batchRequest() {
  const form = $("batch").elements;
  const request = { kind: form.kind.value, dryRun: true, limit: Number(form.limit.value || 50) };
  const errorClass = form.errorClass.value.trim();
  if (errorClass) request.errorClass = errorClass;
  for (const name of ["since", "until"]) {
    if (form[name].value) request[name] = new Date(form[name].value).toISOString();
  }
  return request;
}

function resetBatch() {
  batchPlan = null;
  $("batch-confirm").hidden = true;
}

async function countBatch() {
  resetBatch();
  const request = batchRequest();
  try {
    const report = await api("POST", "/admin/reruns", request);
    const passed = Object.entries(report.leftAlone).map(([reason, count]) => `${count} ${reason.replaceAll("_", " ")}`);
    $("batch-result").textContent = `${report.matched} failed_final ${request.kind} job(s) match.` +
      (passed.length ? ` Left alone: ${passed.join(", ")} (name the error class to re-run cancelled or operator-failed jobs).` : "");
    if (report.matched > 0) {
      batchPlan = { ...request, dryRun: false };
      const confirm = $("batch-confirm");
      confirm.textContent = `Re-run ${report.matched} job(s)`;
      confirm.hidden = false;
      confirm.focus();
    }
  } catch (error) {
    $("batch-result").textContent = `Refused: ${error.message}`;
  }
}

async function runBatch() {
  const plan = batchPlan;
  if (!plan || !window.confirm(`Re-run up to ${plan.limit} failed_final ${plan.kind} job(s)?`)) return;
  resetBatch();
  try {
    const report = await api("POST", "/admin/reruns", plan);
    $("batch-result").textContent =
      `Re-ran ${report.rerun.length} job(s); ${report.skipped.length} changed meanwhile and were skipped; ` +
      `${report.waived.length} run on the house (refunded when they failed).` +
      (report.notReached.length ? ` ${report.notReached.length} not reached before the time limit: re-run again to take them.` : "");
    await Promise.all([loadOverview(), loadDeadLetters(), loadJobs(false)]);
  } catch (error) {
    $("batch-result").textContent = `Refused: ${error.message}`;
  }
}

function emptyRow(body, text, columns) {
  body.appendChild(el("tr")).appendChild(el("td", text, { colspan: String(columns) }));
}

async function showCredits(tenant) {
  const box = $("credits");
  try {
    const credits = await api("GET", `/admin/tenants/${encodeURIComponent(tenant)}/credits?limit=20`);
    $("credits-balance").textContent = `${tenant}: ${credits.balance} credits`;
    const grants = $("credit-grants").tBodies[0];
    grants.replaceChildren();
    for (const grant of credits.grants) {
      const row = el("tr");
      row.append(el("td", grant.grantId), el("td", grant.amount), el("td", grant.remaining),
        el("td", `${when(grant.expiresAt)}${grant.expired ? " (expired)" : ""}`));
      grants.appendChild(row);
    }
    if (!credits.grants.length) emptyRow(grants, "No grants.", 4);
    const transactions = $("credit-transactions").tBodies[0];
    transactions.replaceChildren();
    for (const tx of credits.transactions) {
      const row = el("tr");
      row.append(el("td", when(tx.createdAt)), el("td", tx.type), el("td", tx.amount), el("td", tx.jobId || "-"));
      transactions.appendChild(row);
    }
    if (!credits.transactions.length) emptyRow(transactions, "No transactions.", 4);
    const spend = $("credit-spend").tBodies[0];
    spend.replaceChildren();
    for (const day of credits.spendByDay) {
      const row = el("tr");
      row.append(el("td", day.day), el("td", day.usd));
      spend.appendChild(row);
    }
    if (!credits.spendByDay.length) {
      emptyRow(spend, credits.spendCounted ? "No model spend in the last 30 days."
        : "Model spend is not counted on this stage (the spend brake is off).", 2);
    }
    box.hidden = false;
  } catch (error) {
    box.hidden = true;
    say(error.status === 404 ? `No tenant ${tenant}.` : `Could not load credits: ${error.message}`);
  }
}

function filtersFromUrl() {
  const params = new URLSearchParams(location.search);
  const form = $("filters").elements;
  for (const name of FILTERS) {
    const value = params.get(name);
    if (value !== null && form[name]) {
      if (form[name].tagName === "SELECT" && ![...form[name].options].some((o) => o.value === value)) {
        form[name].appendChild(el("option", value));
      }
      form[name].value = value;
    }
  }
}

function filterQuery() {
  const form = $("filters").elements;
  const params = new URLSearchParams();
  for (const name of FILTERS) {
    let value = form[name].value.trim();
    if (!value) continue;
    if (name === "since" || name === "until") value = new Date(value).toISOString();
    params.set(name, value);
  }
  return params;
}

async function loadJobs(more) {
  const params = filterQuery();
  if (!more) {
    const shown = new URLSearchParams();
    for (const name of FILTERS) if ($("filters").elements[name].value.trim()) shown.set(name, $("filters").elements[name].value.trim());
    history.replaceState(null, "", shown.toString() ? `?${shown}` : location.pathname);
  }
  if (more && nextCursor) params.set("cursor", nextCursor);
  params.set("limit", "25");
  const data = await api("GET", `/admin/jobs?${params}`);
  const body = $("jobs").tBodies[0];
  if (!more) body.replaceChildren();
  for (const job of data.jobs) {
    const row = el("tr", null, { "data-job": job.jobId });
    const id = el("td");
    id.appendChild(jobButton(job.userId, job.jobId));
    row.append(id, el("td", job.kind), el("td", job.userId), el("td", job.status), el("td", job.attempts),
      el("td", job.lastErrorClass ? `${job.lastErrorClass}: ${job.lastErrorMessage || ""}` : "-", { class: "error" }),
      el("td", when(job.updatedAt)));
    body.appendChild(row);
  }
  nextCursor = data.nextCursor;
  $("more").hidden = !nextCursor;
}

function usageText(usage) {
  const entries = Object.entries(usage || {});
  return entries.length ? entries.map(([name, value]) => `${name} ${value}`).join(", ") : null;
}

async function showJob(userId, jobId) {
  try {
    const job = await api("GET", `/admin/jobs/${encodeURIComponent(userId)}/${encodeURIComponent(jobId)}`);
    const fields = $("detail-fields");
    fields.replaceChildren();
    const input = job.input === null || job.input === undefined ? job.inputRef
      : typeof job.input === "string" ? job.input : JSON.stringify(job.input, null, 2);
    for (const [name, value] of [["Job", job.jobId], ["Tenant", job.userId], ["Kind", job.kind],
      ["Status", job.status], ["Attempts", job.attempts], ["Re-runs", job.reruns], ["Model", job.model],
      ["Created", when(job.createdAt)], ["Finished", when(job.finishedAt)], ["Input", input],
      ["Last error", job.lastErrorClass ? `${job.lastErrorClass}: ${job.lastErrorMessage || ""}` : "-"],
      ["Before the last re-run", job.previousErrorClass],
      ["Charge", `${job.chargeState || "free"}${job.chargeWaived ? " (this re-run is on the house)" : ""}`],
      ["Credits", job.price], ["Usage", usageText(job.usage)],
      ["Model cost", job.costUsd === null || job.costUsd === undefined ? null : `${job.costUsd} USD`],
      ["Cancel requested", job.cancelRequestedAt ? when(job.cancelRequestedAt) : null]]) {
      fields.append(el("dt", name), el("dd", value === null || value === undefined ? "-" : value));
    }
    const timeline = $("timeline");
    timeline.replaceChildren();
    for (const entry of job.attemptLog) {
      const item = el("li", null, { class: `outcome-${entry.outcome}` });
      const took = entry.durationMs === null || entry.durationMs === undefined ? "" : ` after ${entry.durationMs} ms`;
      item.textContent = `#${entry.attempt} ${entry.outcome}${took}, ${when(entry.endedAt)}` +
        (entry.errorClass ? ` - ${entry.errorClass}: ${entry.message || ""}` : "");
      timeline.appendChild(item);
    }
    if (!job.attemptLog.length) timeline.appendChild(el("li", "No attempt has ended yet."));
    $("detail").hidden = false;
    $("close-detail").focus();
  } catch (error) {
    say(`Could not load job ${jobId}: ${error.message}`);
  }
}

async function refresh() {
  say("");
  try {
    await loadOverview();
    await Promise.all([loadDeadLetters(), loadJobs(false)]);
  } catch (error) {
    if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
      sessionStorage.removeItem(KEY_SLOT);
      showLogin();
      say(error.status === 403 ? "This key is not an operator key." : "This key is not valid.");
      return;
    }
    say(`Could not load: ${error.message}`);
  }
}

function showLogin() {
  $("login").hidden = false;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("key").focus();
}

async function start() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  filtersFromUrl();
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_SLOT, $("key").value.trim());
    $("key").value = "";
    start();
  });
  $("logout").addEventListener("click", () => { sessionStorage.removeItem(KEY_SLOT); showLogin(); });
  $("refresh").addEventListener("click", refresh);
  $("show-resolved").addEventListener("change", () => loadDeadLetters().catch((e) => say(e.message)));
  $("filters").addEventListener("submit", (event) => { event.preventDefault(); loadJobs(false).catch((e) => say(e.message)); });
  $("more").addEventListener("click", () => loadJobs(true).catch((e) => say(e.message)));
  $("close-detail").addEventListener("click", () => { $("detail").hidden = true; });
  $("batch").addEventListener("submit", (event) => { event.preventDefault(); countBatch(); });
  $("batch").addEventListener("input", resetBatch);  // a confirmation holds for the counted filters only
  $("batch-confirm").addEventListener("click", runBatch);
  $("credits-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const tenant = $("credits-form").elements.tenant.value.trim();
    if (tenant) showCredits(tenant);
  });
  if (sessionStorage.getItem(KEY_SLOT)) start(); else showLogin();
});
