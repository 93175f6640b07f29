// The session page's files panel (docs/workspace.md): the committed snapshot of the session's
// workspace, each file with its size and the task that last changed it. It reads
// GET .../workspace every few seconds while the page is visible, and only that; it writes
// nothing. It fills <section id="workspace-section"> and needs nothing from session.js.
(() => {
  "use strict";
  const section = document.getElementById("workspace-section");
  const match = location.pathname.match(/^(.*)\/sessions\/([^/]+)\/page\/?$/);
  if (!section || !match) return;
  const base = `${match[1]}/sessions/${match[2]}/workspace`;
  const functionKey = new URLSearchParams(location.search).get("code");
  const body = section.querySelector("tbody");
  const summary = section.querySelector(".workspace-summary");
  const INTERVAL_MS = 3000;
  let shown = null; // the snapshot on display

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text;
    return td;
  }

  function fileLink(path) {
    // A link cannot carry a header: the key rides along as ?code=, as on the page's own URL.
    const a = document.createElement("a");
    const encoded = path.split("/").map(encodeURIComponent).join("/");
    a.href = `${base}/files/${encoded}` + (functionKey ? `?code=${encodeURIComponent(functionKey)}` : "");
    a.textContent = path;
    a.rel = "noopener";
    return a;
  }

  function render(view) {
    if (view.snapshot === shown) return;
    shown = view.snapshot;
    body.replaceChildren();
    if (!view.snapshot) {
      summary.textContent = "No files yet.";
      return;
    }
    summary.textContent = `${view.files.length} file(s), snapshot ${view.snapshot.slice(0, 12)}, committed by ${view.task || "?"}`;
    for (const file of view.files) {
      const row = document.createElement("tr");
      const name = document.createElement("td");
      name.appendChild(fileLink(file.path));
      row.append(name, cell(String(file.size), "number"), cell(file.changedBy || "", "task"));
      body.appendChild(row);
    }
  }

  async function refresh() {
    if (document.visibilityState !== "hidden") {
      try {
        const options = { cache: "no-store" };
        if (functionKey) options.headers = { "x-functions-key": functionKey };
        const response = await fetch(base, options);
        if (response.ok) render(await response.json());
        else summary.textContent = `workspace unavailable (${response.status})`;
      } catch (error) {
        summary.textContent = "workspace unavailable";
      }
    }
    setTimeout(refresh, INTERVAL_MS);
  }

  refresh();
})();
