// The live session page: reads the session view, then follows the change stream from the
// view's cursor (changes?after=&wait=) and re-reads the view whenever records arrive. A cursor
// that fell off the log (410) or a lost connection starts over from the view, so the page
// never misses a change and never needs a reload. No framework, no build step.
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

  function setConnection(state) {
    document.body.dataset.state = state;
    const node = $("connection");
    node.textContent = state;
    node.className = `badge ${state}`;
  }

  function shortId(id) {
    return id.length > 12 ? `${id.slice(0, 8)}…` : id;
  }

  function entryBody(entry) {
    if (entry.text !== null && entry.text !== undefined) return entry.text;
    if (entry.content_ref) return el("span", { class: "muted" }, `[stored text ${entry.content_ref.slice(0, 15)}…]`);
    const calls = entry.data && entry.data.tool_calls;
    if (Array.isArray(calls) && calls.length) {
      return el("span", { class: "muted" }, "asks for " + calls.map((c) => c.name).join(", "));
    }
    return el("pre", {}, JSON.stringify(entry.data, null, 1));
  }

  function renderEntries(view) {
    const list = $("entries");
    list.replaceChildren(...view.entries.map((entry) =>
      el("li", { "data-n": entry.n, "data-role": entry.role },
        el("span", { class: "entry-role" }, entry.role),
        entry.conversation !== "main" ? el("span", { class: "muted" }, `[${entry.conversation}] `) : null,
        entryBody(entry))));
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
      setConnection("no session yet");
      return null;
    }
    if (!response.ok) throw new Error(`view: HTTP ${response.status}`);
    const view = await response.json();
    if (view.created_at !== sessionCreatedAt) {
      sessionCreatedAt = view.created_at;
      shownChanges.length = 0;
      addChanges([]);
    }
    renderView(view);
    return view;
  }

  async function step() {
    if (followCursor === null) {
      const view = await readView();
      if (view === null) return RETRY_MS;
      setFollowCursor(view.cursor);
      document.body.dataset.followedFrom = view.cursor;
    }
    const url = `${sessionUrl}/changes?after=${followCursor}&wait=${WAIT_SECONDS}`;
    const response = await api(url);
    if (response.status === 410 || response.status === 404) {
      setFollowCursor(null); // start over from the view
      return response.status === 404 ? RETRY_MS : 0;
    }
    if (!response.ok) throw new Error(`changes: HTTP ${response.status}`);
    const page = await response.json();
    setConnection("live");
    if (page.changes.length) {
      addChanges(page.changes);
      setFollowCursor(page.cursor);
      await readView();
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
        setConnection("offline");
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
