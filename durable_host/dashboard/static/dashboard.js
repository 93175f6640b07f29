// The host's dashboard: plain JavaScript, no dependencies. Reads through
// /admin/dashboard/api, acts through the management API (/runtime/webhooks/durabletask).
"use strict";

const WEBHOOK = "/runtime/webhooks/durabletask";
const API = "/admin/dashboard/api";
const $ = (id) => document.getElementById(id);

// The key (when the host requires one) arrives once as ?code=; it is kept for this tab only
// and taken out of the address bar, then sent as a header on every call.
const KEY = (() => {
  const url = new URL(location.href);
  const code = url.searchParams.get("code");
  if (code) {
    sessionStorage.setItem("durable-host-key", code);
    url.searchParams.delete("code");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem("durable-host-key") || "";
})();

async function call(method, path, body) {
  const headers = {};
  if (KEY) headers["x-functions-key"] = KEY;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : body });
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  if (!resp.ok) {
    const why = (data && (data.message || data.Message || data.ExceptionMessage)) || text || resp.statusText;
    throw new Error(`${resp.status}: ${typeof why === "string" ? why : JSON.stringify(why)}`);
  }
  return data;
}

function say(text) { $("message").textContent = text; }
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("data-")) node.setAttribute(k, v); else node[k] = v;
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}
const pretty = (value) => (value === undefined || value === null ? "null" : JSON.stringify(value, null, 2));
const when = (stamp) => (stamp ? stamp.replace("T", " ").replace(/\.\d+Z$|Z$/, "") : "");
const ms = (stamp) => Date.parse(stamp);

let app = { statuses: [], orchestrators: [], entities: [] };
let pageTokens = [null];  // the token that fetched each page seen; the last is the current page
let nextToken = null;

async function boot() {
  try {
    app = await call("GET", `${API}/app`);
  } catch (e) {
    document.body.dataset.state = "error";
    say(`The dashboard cannot read the host: ${e.message}. With keys on, open it as /admin/dashboard?code=<master key>.`);
    return;
  }
  $("hub").textContent = `- task hub ${app.hub}`;
  for (const s of app.statuses) $("f-status").append(el("option", { value: s }, s));
  for (const n of app.orchestrators) $("f-name").append(el("option", { value: n }, n));
  for (const n of app.entities) $("e-name").append(el("option", { value: n }, n));
  window.addEventListener("hashchange", route);
  $("filters").addEventListener("submit", (ev) => { ev.preventDefault(); listInstances("first"); });
  $("f-sort").addEventListener("change", () => listInstances("first"));
  $("refresh").addEventListener("click", () => listInstances());
  $("first-page").addEventListener("click", () => listInstances("first"));
  $("next-page").addEventListener("click", () => listInstances("next"));
  $("entity-form").addEventListener("submit", (ev) => { ev.preventDefault(); listEntities(); });
  for (const button of document.querySelectorAll("#actions button")) {
    button.addEventListener("click", () => act(button.dataset.action));
  }
  showPartitions();
  await route();
}

// The partitions of the task hub this host runs (several hosts may share an Azure hub).
async function showPartitions() {
  try {
    const status = await call("GET", "/admin/host/status");
    const p = status.partitions;
    if (!p) return;
    const held = p.held.length ? p.held.join(", ") : "none";
    $("partitions").textContent = `Partitions held by this host: ${held} (of ${p.count})`;
  } catch (e) {
    $("partitions").textContent = "";
  }
}

function show(view) {
  for (const id of ["instances-view", "instance-view", "entities-view", "timers-view", "storage-view", "mcp-view"]) $(id).hidden = id !== view;
}

async function route() {
  const hash = location.hash || "#/";
  document.body.dataset.state = "loading";
  if (hash.startsWith("#/instance/")) {
    show("instance-view");
    await showInstance(decodeURIComponent(hash.slice("#/instance/".length)));
  } else if (hash.startsWith("#/timers")) {
    show("timers-view");
    await listTimers();
  } else if (hash.startsWith("#/storage")) {
    show("storage-view");
    await listStorage();
  } else if (hash.startsWith("#/mcp")) {
    show("mcp-view");
    await listMcp();
  } else if (hash.startsWith("#/entities")) {
    show("entities-view");
    await listEntities();
  } else {
    show("instances-view");
    await listInstances();
  }
  document.body.dataset.state = "ready";
}

function filterQuery() {
  const q = new URLSearchParams();
  const put = (name, value) => { if (value) q.set(name, value); };
  put("status", $("f-status").value);
  put("name", $("f-name").value);
  put("from", $("f-from").value);
  put("to", $("f-to").value);
  put("prefix", $("f-prefix").value.trim());
  put("sort", $("f-sort").value);
  return q;
}

// Instances per runtime status under the filters (the status filter aside): each count is a
// button that filters the list by its status (pressed again: any status).
async function showCounts() {
  const q = filterQuery();
  q.delete("status");
  q.delete("sort");
  let data;
  try { data = await call("GET", `${API}/counts?${q}`); } catch (e) { say(e.message); return; }
  const chosen = $("f-status").value;
  const chips = Object.entries(data.counts).map(([status, n]) => {
    const chip = el("button", { type: "button", "data-status": status, "data-count": String(n) },
      el("span", { className: "status", "data-status": status }, status), el("span", { className: "n" }, n));
    chip.setAttribute("aria-pressed", String(status === chosen));
    chip.addEventListener("click", () => {
      $("f-status").value = $("f-status").value === status ? "" : status;
      listInstances("first");
    });
    return chip;
  });
  const total = el("span", { className: "muted", id: "counts-total" },
    `${data.total} instance${data.total === 1 ? "" : "s"}${data.complete ? "" : " counted (the scan stopped there: narrow the filters)"}`);
  $("counts").replaceChildren(...chips, total);
  $("counts").dataset.total = String(data.total);
}

async function listInstances(mode = "refresh") {
  if (mode === "first") pageTokens = [null];
  if (mode === "next" && nextToken) pageTokens.push(nextToken);
  const q = filterQuery();
  const token = pageTokens[pageTokens.length - 1];
  // id order pages with the store's token; a time order with an offset into it
  if (token) q.set($("f-sort").value === "id" ? "after" : "offset", token);
  let data;
  const counted = showCounts();
  try { data = await call("GET", `${API}/instances?${q}`); } catch (e) { say(e.message); await counted; return; }
  await counted;
  nextToken = data.next;
  $("instances").dataset.sort = data.sort;
  if (!data.complete) say(`Sorted among the first instances read; narrow the filters to see them all in ${data.sort} order.`);
  const body = $("instances").tBodies[0];
  body.replaceChildren(...data.instances.map((s) => el("tr", { "data-instance": s.instanceId, "data-status": s.runtimeStatus },
    el("td", {}, el("a", { href: `#/instance/${encodeURIComponent(s.instanceId)}` }, s.instanceId)),
    el("td", {}, s.name),
    el("td", {}, el("span", { className: "status", "data-status": s.runtimeStatus }, s.runtimeStatus)),
    el("td", {}, when(s.createdTime)),
    el("td", {}, when(s.lastUpdatedTime)))));
  if (!data.instances.length) body.append(el("tr", {}, el("td", { colSpan: 5 }, "No instances match.")));
  $("next-page").disabled = !nextToken;
}

let current = null;

async function showInstance(id) {
  let status;
  try { status = await call("GET", `${API}/instances/${encodeURIComponent(id)}`); }
  catch (e) { say(e.message); current = null; return; }
  current = status;
  $("i-name").textContent = status.name;
  $("i-id").textContent = status.instanceId;
  $("i-status").textContent = status.runtimeStatus;
  $("i-status").dataset.status = status.runtimeStatus;
  $("instance-view").dataset.instance = status.instanceId;
  $("instance-view").dataset.status = status.runtimeStatus;
  $("i-input").textContent = pretty(status.input);
  $("i-output").textContent = pretty(status.output);
  $("i-custom").textContent = pretty(status.customStatus);
  const events = status.historyEvents || [];
  $("history").tBodies[0].replaceChildren(...events.map((e) => el("tr", { "data-event": e.EventType },
    el("td", {}, when(e.Timestamp)), el("td", {}, e.EventType), el("td", {}, e.FunctionName || e.Name || ""),
    el("td", {}, detail(e)))));
  drawFamily(status);
  drawTimeline(status, events);
}

function instanceLink(id) {
  return el("a", { href: `#/instance/${encodeURIComponent(id)}`, "data-instance": id }, id);
}

// The parent (when this is a sub-orchestration) and the sub-orchestrations it started, as links.
function drawFamily(status) {
  const parent = status.parentInstanceId;
  $("i-parent").replaceChildren(...(parent ? ["Sub-orchestration of ", instanceLink(parent)] : []));
  $("i-parent").dataset.parent = parent || "";
  const kids = status.subOrchestrations || [];
  $("i-children-box").hidden = kids.length === 0;
  $("i-children-count").textContent = status.subOrchestrationCount > kids.length
    ? `(first ${kids.length} of ${status.subOrchestrationCount})` : `(${kids.length})`;
  $("i-children").tBodies[0].replaceChildren(...kids.map((k) => el("tr", { "data-child": k.instanceId },
    el("td", {}, instanceLink(k.instanceId)), el("td", {}, k.name),
    el("td", {}, el("span", { className: "status", "data-status": k.runtimeStatus || "" }, k.runtimeStatus || "not started")))));
}

async function listTimers() {
  let data;
  try { data = await call("GET", `${API}/timers`); } catch (e) { say(e.message); return; }
  $("t-zone").textContent = data.timeZone;
  const body = $("timers").tBodies[0];
  body.replaceChildren(...data.timers.map((t) => el("tr", { "data-timer": t.name, "data-next": t.next || "" },
    el("td", {}, t.name, t.disabled ? el("span", { className: "muted" }, " (disabled)") : ""),
    el("td", {}, el("code", {}, t.schedule), t.setting ? el("span", { className: "muted" }, ` from %${t.setting}%`) : ""),
    el("td", { className: "next" }, t.next ? when(t.next) : "-"),
    el("td", {}, t.last ? when(t.last) : "never"),
    el("td", {}, t.useMonitor === null ? "-" : t.useMonitor ? "on" : "off"),
    el("td", {}, t.runOnStartup ? "yes" : "no"))));
  if (!data.timers.length) body.append(el("tr", {}, el("td", { colSpan: 6 }, "This app has no timer-triggered functions.")));
}

async function listStorage() {
  let data;
  try { data = await call("GET", `${API}/storage`); } catch (e) { say(e.message); return; }
  const body = $("storage").tBodies[0];
  body.replaceChildren(...data.functions.map((f) => el("tr", { "data-function": f.name },
    el("td", {}, f.name, f.disabled ? el("span", { className: "muted" }, " (disabled)") : ""),
    el("td", {}, f.trigger),
    el("td", {}, el("code", {}, f.source)),
    el("td", { className: "waiting" }, f.waiting === null ? "-" : String(f.waiting)),
    el("td", {}, f.oldestAgeSeconds === null ? "-" : String(f.oldestAgeSeconds)))));
  if (!data.functions.length) body.append(el("tr", {}, el("td", { colSpan: 5 }, "This app has no queue- or blob-triggered functions.")));
}

async function listMcp() {
  let data;
  try { data = await call("GET", `${API}/mcp`); } catch (e) { say(e.message); return; }
  $("mcp-endpoint").textContent = location.origin + data.endpoint;
  const none = (table, cols, text) => { if (!$(table).tBodies[0].rows.length) $(table).tBodies[0].append(el("tr", {}, el("td", { colSpan: cols }, text))); };
  const toolArgs = (t) => Object.keys(t.inputSchema.properties || {}).map((n) => (t.inputSchema.required || []).includes(n) ? `${n}*` : n).join(", ");
  $("mcp-tools").tBodies[0].replaceChildren(...data.tools.map((t) => el("tr", { "data-tool": t.name },
    el("td", {}, t.name), el("td", {}, t.function), el("td", {}, t.description || ""), el("td", {}, toolArgs(t)))));
  $("mcp-resources").tBodies[0].replaceChildren(...data.resources.map((r) => el("tr", { "data-resource": r.uri || r.uriTemplate },
    el("td", {}, el("code", {}, r.uri || r.uriTemplate)), el("td", {}, r.name), el("td", {}, r.function),
    el("td", {}, r.mimeType || ""), el("td", {}, r.description || ""))));
  $("mcp-prompts").tBodies[0].replaceChildren(...data.prompts.map((p) => el("tr", { "data-prompt": p.name },
    el("td", {}, p.name), el("td", {}, p.function), el("td", {}, p.description || ""),
    el("td", {}, (p.arguments || []).map((a) => a.required ? `${a.name}*` : a.name).join(", ")))));
  none("mcp-tools", 4, "This app has no MCP tools.");
  none("mcp-resources", 5, "This app has no MCP resources.");
  none("mcp-prompts", 4, "This app has no MCP prompts.");
}

function detail(e) {
  if (e.Reason || e.Details) return `${e.Reason || ""} ${e.Details ? e.Details.split("\n")[0] : ""}`.trim();
  if (e.FireAt) return `fires at ${when(e.FireAt)}`;
  if (e.Result !== undefined) return JSON.stringify(e.Result).slice(0, 120);
  return e.OrchestrationStatus || "";
}

// History rows -> bars: activities and sub-orchestrations from their scheduled time to
// their outcome, timers from creation to firing, raised events as moments.
function spans(status, events) {
  const now = new Date().toISOString();
  const out = [];
  const timers = new Map();
  for (const e of events) {
    const t = e.EventType;
    if (t === "TaskCompleted" || t === "TaskFailed") {
      out.push({ kind: "activity", name: e.FunctionName, start: e.ScheduledTime, end: e.Timestamp, outcome: t === "TaskFailed" ? "failed" : "ok" });
    } else if (t === "TaskScheduled") {
      out.push({ kind: "activity", name: e.Name, start: e.Timestamp, end: now, outcome: "pending" });
    } else if (t === "SubOrchestrationInstanceCompleted" || t === "SubOrchestrationInstanceFailed") {
      out.push({ kind: "suborchestration", name: e.FunctionName, start: e.ScheduledTime, end: e.Timestamp, outcome: t.endsWith("Failed") ? "failed" : "ok" });
    } else if (t === "SubOrchestrationInstanceCreated") {
      out.push({ kind: "suborchestration", name: e.Name, start: e.Timestamp, end: now, outcome: "pending" });
    } else if (t === "TimerCreated") {
      const span = { kind: "timer", name: `timer until ${when(e.FireAt)}`, start: e.Timestamp, end: e.FireAt, outcome: "pending" };
      timers.set(e.FireAt, span);
      out.push(span);
    } else if (t === "TimerFired") {
      const span = timers.get(e.FireAt);
      if (span) { span.end = e.Timestamp; span.outcome = "ok"; timers.delete(e.FireAt); }
    } else if (t === "EventRaised") {
      out.push({ kind: "event", name: `event ${e.Name}`, start: e.Timestamp, end: e.Timestamp, outcome: "ok" });
    }
  }
  const started = events.find((e) => e.EventType === "ExecutionStarted");
  const ended = [...events].reverse().find((e) => ["ExecutionCompleted", "ExecutionTerminated", "ExecutionFailed"].includes(e.EventType));
  const begin = started ? started.Timestamp : status.createdTime;
  const finish = ended ? ended.Timestamp : (["Running", "Pending", "Suspended"].includes(status.runtimeStatus) ? now : status.lastUpdatedTime);
  const live = !ended && ["Running", "Pending", "Suspended"].includes(status.runtimeStatus);
  if (!live) {  // what was still open when the instance ended stops there
    for (const span of out) if (span.outcome === "pending" && ms(span.end) > ms(finish)) span.end = finish;
  }
  out.unshift({ kind: "orchestration", name: status.name, start: begin, end: finish, outcome: live ? "pending" : "ok" });
  return out;
}

function drawTimeline(status, events) {
  const rows = spans(status, events);
  const t0 = Math.min(...rows.map((r) => ms(r.start)));
  const t1 = Math.max(...rows.map((r) => ms(r.end)), t0 + 1);
  const width = t1 - t0;
  const box = $("timeline");
  box.replaceChildren(el("div", { className: "axis" }, el("span", {}, when(new Date(t0).toISOString())),
    el("span", {}, `${((t1 - t0) / 1000).toFixed(3)} s`), el("span", {}, when(new Date(t1).toISOString()))));
  for (const r of rows) {
    const left = ((ms(r.start) - t0) / width) * 100;
    const span = Math.max(0, ms(r.end) - ms(r.start));
    const bar = el("div", { className: "bar", "data-kind": r.kind, "data-name": r.name || "", "data-outcome": r.outcome,
      title: `${r.kind} ${r.name}: ${(span / 1000).toFixed(3)} s${r.outcome === "pending" ? " (not finished)" : ""}` },
      `${(span / 1000).toFixed(3)} s`);
    bar.style.left = `${left}%`;
    bar.style.width = `${(span / width) * 100}%`;
    box.append(el("div", { className: "lane" }, el("span", { className: "label" }, `${r.kind}: ${r.name}`), el("div", { className: "track" }, bar)));
  }
}

// --- actions, each confirmed in a dialog --------------------------------------------------

function ask(action) {
  return new Promise((resolve) => {
    const dialog = $("confirm");
    const id = current.instanceId;
    $("confirm-text").textContent = action === "purge"
      ? `Purge ${id}? Its history is deleted for good.`
      : `${action} ${id}?`;
    $("confirm-event-label").hidden = action !== "raiseEvent";
    $("confirm-payload-label").hidden = action !== "raiseEvent";
    $("confirm-reason-label").hidden = ["raiseEvent", "purge"].includes(action);
    dialog.dataset.action = action;
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

async function act(action) {
  if (!current) return;
  const id = encodeURIComponent(current.instanceId);
  if (!(await ask(action))) { say(`${action} cancelled`); return; }
  try {
    if (action === "purge") {
      await call("DELETE", `${WEBHOOK}/instances/${id}`);
      say(`purged ${current.instanceId}`);
      location.hash = "#/";
      return;
    }
    if (action === "raiseEvent") {
      const name = $("confirm-event").value.trim();
      const payload = $("confirm-payload").value.trim() || "null";
      JSON.parse(payload);
      await call("POST", `${WEBHOOK}/instances/${id}/raiseEvent/${encodeURIComponent(name)}`, payload);
    } else {
      const reason = encodeURIComponent($("confirm-reason").value || `${action} from the dashboard`);
      await call("POST", `${WEBHOOK}/instances/${id}/${action}?reason=${reason}`);
    }
    say(`${action} accepted for ${current.instanceId}`);
  } catch (e) { say(`${action} failed: ${e.message}`); return; }
  for (let i = 0; i < 20; i++) {  // the action is applied by the host's engine shortly after
    await new Promise((r) => setTimeout(r, 250));
    const before = current.runtimeStatus;
    await showInstance(current.instanceId);
    if (current && current.runtimeStatus !== before) break;
  }
}

async function listEntities() {
  const name = $("e-name").value;
  const body = $("entities").tBodies[0];
  if (!name) { body.replaceChildren(el("tr", {}, el("td", { colSpan: 3 }, "This app defines no entities."))); return; }
  let data;
  try { data = await call("GET", `${API}/entities?name=${encodeURIComponent(name)}`); } catch (e) { say(e.message); return; }
  body.replaceChildren(...data.entities.map((e) => el("tr", { "data-entity": e.key },
    el("td", {}, e.key), el("td", {}, when(e.lastOperationTime)), el("td", {}, el("pre", {}, pretty(e.state))))));
  if (!data.entities.length) body.append(el("tr", {}, el("td", { colSpan: 3 }, "No entities of this name yet.")));
}

boot();
