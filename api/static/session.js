// The live session page: reads the session view, then follows the change stream from the
// view's cursor (changes?after=&wait=) and re-reads the view whenever records arrive. A cursor
// that fell off the log (410) or a lost connection starts over from the view, so the page
// never misses a change and never needs a reload. Previews (streamed model text, tool progress)
// come with every change answer; the page passes the tag of the previews it shows, so it is
// woken when they change, and shows them after the entries, marked as previews, until the
// entry that supersedes them arrives. Tool calls show as cards (tool, arguments, outcome,
// replay policy, tier), one card per call folding its intent, outcome and result entries,
// with the entries' JSON behind a toggle. The status line says `live` as soon as the change
// stream answers (the first request after a view read does not wait), and says when the
// connection dropped and that the page is reconnecting. No framework, no build step.
"use strict";

(function () {
  const WAIT_SECONDS = 25;
  const RETRY_MS = 1000;
  const MAX_CHANGES_SHOWN = 100;

  const match = location.pathname.match(/^(.*)\/sessions\/([^/]+)\/page\/?$/);
  const apiRoot = match ? match[1] : "/api";
  const sessionId = match ? decodeURIComponent(match[2]) : "";
  const sessionUrl = `${apiRoot}/sessions/${encodeURIComponent(sessionId)}`;
  const $ = (id) => document.getElementById(id);
  // The page is opened with ?code=<function key> when the app's routes need a key (a browser
  // cannot add headers to a link); its API calls pass the key on in the header.
  const functionKey = new URLSearchParams(location.search).get("code");

  function api(url, init) {
    const options = { cache: "no-store", ...(init || {}) };
    if (functionKey) options.headers = { ...(options.headers || {}), "x-functions-key": functionKey };
    return fetch(url, options);
  }

  let followCursor = null; // the "after" of the next change request; null: read the view first
  let sessionCreatedAt = null; // a deleted and recreated session starts its cursors over
  const shownChanges = [];
  let previewTag = ""; // the tag of the previews shown; "" for none
  let previews = [];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function badge(text) {
    return el("span", { class: `badge ${text}` }, text);
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  let viewStale = false; // a round failed: read the view again before following on
  let droppedAt = null; // when the connection was lost, until the stream answers again

  function clock() {
    return new Date().toISOString().slice(11, 19);
  }

  function setConnection(state, detail) {
    document.body.dataset.state = state;
    const node = $("connection");
    node.textContent = state;
    node.className = `badge ${state.replace(/ /g, "_")}`;
    $("connection-detail").textContent = detail || "";
  }

  function streamAnswered() {
    const note = droppedAt ? `reconnected at ${clock()} after a drop at ${droppedAt}` : `since ${clock()}`;
    if (document.body.dataset.state !== "live" || droppedAt) setConnection("live", note);
    droppedAt = null;
    document.body.dataset.answeredAt = clock();
  }

  function connectionLost(error) {
    if (!droppedAt) droppedAt = clock();
    setConnection("reconnecting", `connection lost at ${droppedAt} (${error.message || error}); retrying every ${RETRY_MS / 1000} s`);
  }

  function shortId(id) {
    return id.length > 12 ? `${id.slice(0, 8)}…` : id;
  }

  function rawToggle(value) {
    return el("details", { class: "raw" }, el("summary", {}, "raw JSON"),
      el("pre", {}, JSON.stringify(value, null, 1)));
  }

  function entryBody(entry) {
    const calls = entry.data && entry.data.tool_calls;
    const asks = Array.isArray(calls) && calls.length
      ? el("span", { class: "muted asks" }, "asks for " + calls.map((c) => c.name).join(", "))
      : null;
    if (entry.text !== null && entry.text !== undefined) {
      return el("span", {}, el("span", { class: "entry-text" }, entry.text), asks ? " " : null, asks);
    }
    if (entry.content_ref) return el("span", { class: "muted" }, `[stored text ${entry.content_ref.slice(0, 15)}…]`);
    if (asks) return asks;
    return rawToggle(entry.data);
  }

  // One card per tool call: the entries of a call (intent, outcome, result) share its
  // tool_call_id; the card stands where the first of them is.
  function toolCallId(entry) {
    const data = entry.data;
    return entry.role === "tool" && data && typeof data.tool_call_id === "string" ? data.tool_call_id : null;
  }

  function argumentList(data) {
    if (data.arguments && typeof data.arguments === "object") {
      const pairs = Object.entries(data.arguments);
      if (!pairs.length) return el("span", { class: "muted" }, "none");
      return el("dl", { class: "args" }, ...pairs.flatMap(([key, value]) =>
        [el("dt", {}, key), el("dd", {}, typeof value === "string" ? value : JSON.stringify(value))]));
    }
    if (data.arguments_digest) return el("span", { class: "muted" }, `[stored arguments ${data.arguments_digest.slice(0, 15)}…]`);
    return el("span", { class: "muted" }, "-");
  }

  function resultText(result) {
    if (result === undefined || result === null) return null;
    if (typeof result !== "object") return String(result);
    const said = result.summary || result.message || result.text || result.value;
    if (said !== undefined && said !== null && said !== "") return typeof said === "string" ? said : JSON.stringify(said);
    return JSON.stringify(result);
  }

  function toolCard(entries, tasks) {
    const byKind = {};
    for (const entry of entries) byKind[entry.kind] = entry;
    const intent = (byKind.tool_intent || {}).data || {};
    const outcome = (byKind.tool_outcome || {}).data || null;
    const message = byKind.message || null;
    const first = entries[0].data;
    const taskId = first.tool_task_id || intent.tool_task_id;
    const task = (taskId && tasks[taskId]) || null;
    const ok = outcome ? outcome.ok : message && message.data ? message.data.ok : undefined;
    const outcomeText = ok === undefined
      ? (task ? task.status : "pending")
      : `${ok ? "ok" : "failed"}${outcome && outcome.kind ? ` (${outcome.kind})` : ""}` +
        (outcome && outcome.runs ? `, ran ${outcome.runs}×` : "");
    const said = message ? (message.data && message.data.result !== undefined
      ? resultText(message.data.result)
      : message.content_ref ? `[stored result ${message.content_ref.slice(0, 15)}…]` : message.text) : null;
    const field = (name, ...value) => [el("dt", {}, name), el("dd", { "data-field": name }, ...value)];
    return el("li", {
      class: "tool-card", value: entries[0].n, "data-n": entries[0].n, "data-role": "tool", "data-tool-call": first.tool_call_id,
      "data-tool": first.name || intent.name || "", "data-outcome": ok === undefined ? "pending" : ok ? "ok" : "failed",
      "data-entries": entries.map((e) => e.n).join(","),
    },
    el("div", { class: "card-head" },
      el("span", { class: "entry-role" }, "tool"), el("strong", { class: "tool-name" }, first.name || intent.name || "?"),
      " ", badge(ok === undefined ? "pending" : ok ? "completed" : "failed"),
      el("code", { class: "muted", title: "tool call id" }, ` ${first.tool_call_id}`)),
    el("dl", { class: "card-fields" },
      ...field("arguments", byKind.tool_intent ? argumentList(intent) : el("span", { class: "muted" }, "-")),
      ...field("outcome", outcomeText),
      ...field("replay policy", intent.policy || "-", intent.requires_approval ? " · needs approval" : ""),
      ...field("tier", (task && task.tier) || "-"),
      ...(said !== null && said !== undefined ? field("result", said) : [])),
    rawToggle(entries.map((e) => ({ n: e.n, kind: e.kind, data: e.data, content_ref: e.content_ref || undefined }))));
  }

  let shownEntries = [];

  function renderEntries(view) {
    const calls = new Map();
    for (const entry of view.entries) {
      const id = toolCallId(entry);
      if (id !== null) calls.set(id, [...(calls.get(id) || []), entry]);
    }
    shownEntries = [];
    for (const entry of view.entries) {
      const id = toolCallId(entry);
      if (id !== null) {
        if (calls.get(id)[0] === entry) shownEntries.push(toolCard(calls.get(id), view.tasks));
        continue;
      }
      shownEntries.push(el("li", { value: entry.n, "data-n": entry.n, "data-role": entry.role },
        el("span", { class: "entry-role" }, entry.role),
        entry.conversation !== "main" ? el("span", { class: "muted" }, `[${entry.conversation}] `) : null,
        entryBody(entry)));
    }
    renderPreviews();
  }

  function renderPreviews() {
    const items = previews.map((preview) => {
      const model = preview.kind === "model_text";
      return el("li", {
        class: "preview", "data-preview-task": preview.task, "data-preview-kind": preview.kind,
        "data-seq": preview.seq, "data-role": model ? "assistant" : "tool",
      },
      el("span", { class: "entry-role" }, model ? "assistant" : "tool"),
      el("span", { class: "badge preview" }, model ? "streaming" : "running"), " ",
      el("span", { class: "preview-text" }, preview.text + (preview.truncated ? " …" : "")));
    });
    $("entries").replaceChildren(...shownEntries, ...items);
    document.body.dataset.previewTag = previewTag;
  }

  function setPreviews(page) {
    if (page.previewTag === previewTag) return;
    previewTag = page.previewTag;
    previews = page.previews || [];
    renderPreviews();
  }

  function renderSubmissions(view) {
    const rows = Object.values(view.submissions).sort((a, b) => a.entry - b.entry);
    $("submissions").tBodies[0].replaceChildren(...rows.map((sub, i) => {
      let status = badge(sub.status);
      const position = view.turn_queue.indexOf(sub.id);
      if (position >= 0) status = el("span", {}, status, ` #${position + 1} in queue`);
      return el("tr", { "data-submission": sub.id, "data-status": sub.status },
        el("td", {}, i + 1),
        el("td", {}, el("code", { title: sub.id }, shortId(sub.id))),
        el("td", {}, sub.text !== null ? sub.text : el("span", { class: "muted" }, "[stored text]")),
        el("td", {}, status),
        el("td", { class: "answer" }, sub.answer || ""));
    }));
  }

  function renderTasks(view) {
    const tasks = view.tasks;
    const seen = new Set();
    function node(task) {
      seen.add(task.id);
      const kids = (task.children || []).filter((id) => tasks[id] && !seen.has(id)).map((id) => node(tasks[id]));
      return el("li", { "data-task": task.id, "data-status": task.status, "data-phase": task.phase || "", "data-tier": task.tier || "" },
        el("code", { title: task.id }, task.kind), " ", badge(task.status),
        // how far a task under a failure policy got: ok, retried, handled, needs_attention
        task.tier ? el("span", { class: "tier", title: "failure tier" }, ` [${task.tier}]`) : null,
        task.phase ? el("span", { class: "muted" }, ` ${task.phase}`) : null,
        task.reason ? el("span", { class: "muted" }, ` — ${task.reason}`) : null,
        el("div", { class: "muted" }, el("small", {}, task.id)),
        kids.length ? el("ul", {}, ...kids) : null);
    }
    const roots = Object.values(tasks).filter((t) => !t.parent || !tasks[t.parent]);
    $("tasks").replaceChildren(...roots.map(node));
  }

  function renderDocuments(view) {
    const docs = Object.entries(view.documents);
    $("documents").replaceChildren(...(docs.length ? docs.map(([id, doc]) =>
      el("div", { "data-document": id },
        el("strong", {}, id), " ", el("span", { class: "muted" }, `${doc.type} v${doc.version}`),
        el("pre", {}, JSON.stringify(doc.data, null, 1).slice(0, 4000)))) : [el("p", { class: "muted" }, "none yet")]));
  }

  function renderView(view) {
    document.title = `Session ${sessionId}`;
    $("view-cursor").textContent = view.cursor;
    document.body.dataset.viewCursor = view.cursor;
    renderSubmissions(view);
    renderTasks(view);
    renderEntries(view);
    renderDocuments(view);
  }

  function itemText(item) {
    switch (item.type) {
      case "entry": return `entry ${item.n} (${item.role})`;
      case "task": return `task ${item.id.split(":").slice(-1)[0]} ${item.status}${item.phase ? "/" + item.phase : ""}`;
      case "submission": return `submission ${shortId(item.id)} ${item.status}`;
      case "document": return `document ${item.id} v${item.version}`;
      default: return `${item.type} ${item.id || ""}`;
    }
  }

  function addChanges(records) {
    shownChanges.push(...records);
    shownChanges.splice(0, Math.max(0, shownChanges.length - MAX_CHANGES_SHOWN));
    $("changes").replaceChildren(...shownChanges.slice().reverse().map((record) =>
      el("li", { value: record.cursor, "data-cursor": record.cursor },
        el("code", {}, record.op), " ", record.items.map(itemText).join("; "))));
  }

  function setFollowCursor(cursor) {
    followCursor = cursor;
    $("follow-cursor").textContent = cursor === null ? "-" : cursor;
    if (cursor !== null) document.body.dataset.followCursor = cursor;
  }

  async function readView() {
    const response = await api(sessionUrl);
    if (response.status === 404) {
      setConnection("no session yet", `waiting for the session to be created (checked at ${clock()})`);
      droppedAt = null;
      return null;
    }
    if (!response.ok) throw new Error(`view: HTTP ${response.status}`);
    const view = await response.json();
    // A session whose first submission is still in flight answers an empty view (cursor 0)
    // stamped with the time of the read: it names no incarnation yet, so it must not make the
    // committed session that follows look recreated (which would drop the changes shown).
    const incarnation = view.cursor > 0 ? view.created_at : null;
    if (incarnation !== null && incarnation !== sessionCreatedAt) {
      if (sessionCreatedAt !== null) {
        shownChanges.length = 0;
        addChanges([]);
      }
      sessionCreatedAt = incarnation;
    }
    renderView(view);
    return view;
  }

  async function step() {
    // Right after a view read the stream is asked not to wait: its answer says the page is
    // up to date (live) at once, instead of after a long poll on a quiet session.
    let wait = WAIT_SECONDS;
    if (followCursor === null) {
      const view = await readView();
      if (view === null) return RETRY_MS;
      setFollowCursor(view.cursor);
      document.body.dataset.followedFrom = view.cursor;
      wait = 0;
    } else if (viewStale) {
      if ((await readView()) === null) {
        setFollowCursor(null);
        return RETRY_MS;
      }
      wait = 0;
    }
    viewStale = false;
    const url = `${sessionUrl}/changes?after=${followCursor}&wait=${wait}` +
      `&previews=${encodeURIComponent(previewTag)}`;
    const response = await api(url);
    if (response.status === 410 || response.status === 404) {
      setFollowCursor(null); // start over from the view
      return response.status === 404 ? RETRY_MS : 0;
    }
    if (!response.ok) throw new Error(`changes: HTTP ${response.status}`);
    const page = await response.json();
    streamAnswered();
    if (page.changes.length) {
      addChanges(page.changes);
      setFollowCursor(page.cursor);
      // The previews go with the view they were judged against: set them before the entries
      // are drawn, so a superseded preview is never drawn next to its entry.
      previews = page.previews || [];
      previewTag = page.previewTag;
      await readView();
    } else {
      setPreviews(page);
    }
    return 0;
  }

  async function follow() {
    // A live page follows for as long as it is open; every round waits on the server or backs off.
    for (;;) {
      let pause;
      try {
        pause = await step();
      } catch (error) {
        connectionLost(error);
        viewStale = true; // the view read may be what failed: read it again first
        pause = RETRY_MS;
      }
      if (pause) await sleep(pause);
    }
  }

  function newRequestId() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    return `page-${Date.now()}-${Math.random().toString(16).slice(2)}`;
  }

  async function ask(event) {
    event.preventDefault();
    const input = $("ask-text");
    const text = input.value;
    const response = await api(`${sessionUrl}/submissions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ requestId: newRequestId(), text }),
    });
    const body = await response.json();
    $("ask-result").textContent = response.ok ? `accepted ${shortId(body.submissionId)}` : body.message;
    if (response.ok) input.value = "";
  }

  $("session-id").textContent = sessionId;
  $("ask").addEventListener("submit", (event) => {
    ask(event).catch((error) => { $("ask-result").textContent = String(error); });
  });
  follow();
})();
