// The Shuttle web console: submit a task, watch its log live over SSE, steer it.
// Every value from the API or the log reaches the page as text (textContent, text nodes);
// the only markup is what markdown.js makes of an answer after escaping it.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const md = window.ShuttleMarkdown;
  // The key lasts as long as the tab (sessionStorage): localStorage would keep it on disk,
  // for any later script of this origin to read, so none is left there.
  localStorage.removeItem("shuttle.apiKey");
  const state = { auth: "off", key: sessionStorage.getItem("shuttle.apiKey") || "", wf: null, source: null, lastSeq: 0, answer: "", tools: {}, approvals: {}, ended: false, session: "", tasks: [] };
  // What the run has spent so far, from its LLM_OUTPUT and TOOL_OBSERVATION events.
  const fresh = () => ({ tokens: 0, cost: 0, tools: 0, steps: 0, step: null });
  let spent = fresh();

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (state.key) h["Authorization"] = "Bearer " + state.key;
    return h;
  }
  async function api(method, path, body) {
    const init = { method: method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
    if (body) init.body = JSON.stringify(body);
    const response = await fetch(path, init);
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      const message = (data.error && data.error.message) || response.statusText;
      throw new Error(response.status + ": " + message);
    }
    return data;
  }
  function toast(message) {
    const el = $("toast");
    el.textContent = message; el.hidden = false;
    clearTimeout(toast.timer); toast.timer = setTimeout(() => { el.hidden = true; }, 8000);
  }
  // An element with `props` set (className, href, dataset) and `children` appended: strings
  // as text nodes, never as markup.
  function node(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (name === "dataset") Object.assign(el.dataset, value); else el[name] = value;
    }
    el.append(...children);
    return el;
  }
  function item(cls, ...children) {
    const li = node("li", { className: cls }, ...children);
    $("timeline").appendChild(li);
    return li;
  }
  // A payload value as the text to show: strings as they are, anything else as JSON.
  const shown = (v) => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v, null, 2));
  // Figures as people read them: "< $0.01", "1 tool call", "340 ms", "2.41 s".
  const isNumber = (v) => typeof v === "number" && isFinite(v);
  const plural = (n, one) => n + " " + one + (n === 1 ? "" : "s");
  function money(usd) {
    if (!isNumber(usd)) return "$" + shown(usd);
    if (usd === 0) return "$0.00";
    return usd < 0.01 ? "< $0.01" : "$" + usd.toFixed(2);
  }
  const duration = (ms) => (!isNumber(ms) ? shown(ms) + " ms" : ms < 1000 ? Math.round(ms) + " ms" : (ms / 1000).toFixed(2) + " s");
  const at = (e) => Date.parse(e.timestamp || "");
  const ENDED = ["completed", "failed", "cancelled"];
  // Each control is enabled only while it can act: no Pause on a paused or finished run.
  function setControls(status) {
    const can = { pause: status === "running" || status === "pending", resume: status === "paused",
      cancel: !ENDED.includes(status) };
    document.querySelectorAll(".controls button").forEach((b) => { b.disabled = !can[b.dataset.action]; });
    $("interrupt").disabled = $("interrupt-send").disabled = ENDED.includes(status);
  }
  function setStatus(status) {
    const el = $("run-status");
    el.textContent = status; el.className = "status " + status;
    setControls(status);
  }
  function showSpent() {
    $("counters").textContent = plural(spent.tokens, "token") + " · " + money(spent.cost) + " · " +
      plural(spent.tools, "tool call") + " · " + plural(spent.steps, "step");
  }
  // A step is one iteration of the agent: it ends when the next begins or the answer does.
  function endStep(e) {
    const step = spent.step;
    if (!step) return;
    spent.step = null;
    const ms = at(e) - step.started;
    step.li.querySelector(".took").textContent = isFinite(ms) ? " · " + duration(ms) : "";
  }

  // -- one event of the log onto the page ------------------------------------------------
  let renderPending = false;
  function renderAnswer() {
    if (renderPending) return;
    renderPending = true;
    requestAnimationFrame(() => { renderPending = false; const a = $("answer"); a.hidden = !state.answer; a.innerHTML = md.render(state.answer); });
  }
  function toolCard(p) {
    return item("tool running", node("details", {},
      node("summary", {}, "Tool · " + shown(p.tool_name), node("span", { className: "took" })),
      node("div", {}, "Arguments"), node("pre", { className: "args" }, shown(p.tool_args)),
      node("div", { className: "obs" })));
  }
  // An artifact is fetched with the key (so not by a plain link) and shown beside its card:
  // HTML in a sandboxed frame that may run nothing, markdown rendered as answers are, other
  // text as text, anything else as a download.
  function artifactButton(a) {
    const size = isNumber(a.size_bytes) ? (a.size_bytes < 1024 ? a.size_bytes + " B" : (a.size_bytes / 1024).toFixed(1) + " KiB") : shown(a.size_bytes);
    const b = node("button", { className: "secondary artifact", type: "button" }, "Preview " + shown(a.name) + " (" + size + ")");
    b.addEventListener("click", () => previewArtifact(b, shown(a.name)));
    return b;
  }
  async function previewArtifact(button, name) {
    const url = "/api/v1/tasks/" + encodeURIComponent(state.wf) + "/artifacts/" + encodeURIComponent(name);
    try {
      const response = await fetch(url, { headers: headers() });
      if (!response.ok) {
        const data = await response.json().catch(() => ({}));
        throw new Error(response.status + ": " + ((data.error && data.error.message) || response.statusText));
      }
      const mime = (response.headers.get("content-type") || "").split(";")[0].trim();
      let view;
      if (mime === "text/html") {
        view = node("iframe", { className: "preview", title: name });
        view.setAttribute("sandbox", "");
        view.srcdoc = await response.text();
      } else if (mime === "text/markdown") {
        view = node("div", { className: "preview answer" });
        view.innerHTML = md.render(await response.text());
      } else if (mime.startsWith("text/") || mime === "application/json") {
        view = node("pre", { className: "preview" }, await response.text());
      } else {
        view = node("a", { className: "preview", href: URL.createObjectURL(await response.blob()), download: name }, "Download " + name);
      }
      button.replaceWith(view);
    } catch (err) { toast(err.message); }
  }
  const handlers = {
    WORKFLOW_STARTED: (e) => { setStatus("running"); $("run-query").textContent = e.payload.query || ""; },
    AGENT_THINKING: (e) => {
      const p = e.payload;
      if (p.status === "start") {
        endStep(e);
        spent.steps += 1;
        const li = item("step", node("b", {}, "Step " + shown(p.iteration)), node("span", { className: "took" }));
        spent.step = { li: li, started: at(e) };
        showSpent();
      } else if (p.status === "done" && p.reasoning) item("thinking", "Thought · " + shown(p.reasoning));
    },
    LLM_OUTPUT: (e) => {
      const usage = e.payload.usage || {};
      if (isNumber(usage.total_tokens)) spent.tokens += usage.total_tokens;
      if (isNumber(e.payload.cost_usd)) spent.cost += e.payload.cost_usd;
      showSpent();
    },
    TOOL_INVOKED: (e) => { state.tools[e.payload.call_id || e.seq] = toolCard(e.payload); },
    TOOL_OBSERVATION: (e) => {
      const p = e.payload;
      const li = state.tools[p.call_id] || toolCard(p);
      li.classList.remove("running");
      li.classList.add(p.error || p.blocked ? "error" : "done");
      li.querySelector(".took").textContent = " · " + duration(p.duration_ms || 0);
      li.querySelector(".obs").replaceChildren(
        node("div", {}, (p.error ? "Error" : "Observation") + " (" + duration(p.duration_ms || 0) + ")"),
        node("pre", { className: "observation" }, shown(p.result)));
      if (Array.isArray(p.artifacts) && p.artifacts.length) {
        li.querySelector(".obs").append(node("div", {}, "Artifacts"),
          ...p.artifacts.map((a) => artifactButton(a || {})));
      }
      spent.tools += 1;
      showSpent();
    },
    THREAD_MESSAGE_DELTA: (e) => { endStep(e); state.answer += shown(e.payload.delta); renderAnswer(); },
    // The run moved to another executor, which tells the answer again from its first delta.
    STATUS_UPDATE: (e) => { if (e.payload.kind === "answer_restarted") { state.answer = ""; renderAnswer(); item("notice", "— answer restarted —"); } },
    THREAD_MESSAGE_COMPLETED: (e) => { endStep(e); state.answer = shown(e.payload.content) || state.answer; renderAnswer(); },
    APPROVAL_REQUESTED: (e) => {
      const p = e.payload;
      const li = item("approval", "Approval needed for ", node("b", {}, shown(p.tool_name || "a tool")),
        node("pre", {}, shown(p.tool_args || (p.details && p.details.arguments) || p.arguments || {})),
        node("div", { className: "verdict" }));
      const id = p.approval_id;
      state.approvals[shown(id)] = li;
      ["approved", "denied"].forEach((decision) => {
        const b = node("button", { className: decision === "approved" ? "" : "danger", dataset: { decision: decision } },
          decision === "approved" ? "Approve" : "Deny");
        b.addEventListener("click", () => api("POST", "/api/v1/approvals/" + encodeURIComponent(id), { decision: decision })
          .then(() => { li.querySelectorAll("button").forEach((x) => { x.disabled = true; }); }).catch((err) => toast(err.message)));
        li.appendChild(b);
      });
    },
    APPROVAL_DECISION: (e) => {
      const p = e.payload;
      const card = state.approvals[shown(p.approval_id)];
      if (card) {
        card.querySelectorAll("button").forEach((x) => { x.disabled = true; });
        card.querySelector(".verdict").textContent = "Decision: " + shown(p.decision || "");
        card.classList.add("decided");
      }
      item("notice", "Approval " + shown(p.decision || p.status || ""));
    },
    MESSAGE_RECEIVED: (e) => { if (e.payload.from === "user") item("notice", "Follow-up: " + shown(e.payload.content || e.message)); },
    WORKSPACE_UPDATED: (e) => { if (e.payload.kind === "compact") item("notice", "— context compacted —"); },
    WORKFLOW_PAUSED: () => setStatus("paused"),
    WORKFLOW_RESUMED: () => setStatus("running"),
    WORKFLOW_CANCELLED: (e) => { endStep(e); setStatus("cancelled"); },
    ERROR_OCCURRED: (e) => { item("notice", "Error: " + shown(e.payload.error_message || e.message)); if (e.payload.fatal) { endStep(e); setStatus("failed"); } },
    WORKFLOW_COMPLETED: (e) => {
      const p = e.payload;
      endStep(e);
      setStatus("completed");
      if (!state.answer && p.result) { state.answer = shown(p.result); renderAnswer(); }
      const f = $("usage");
      f.hidden = false;
      f.textContent = shown(p.total_tokens || 0) + " tokens (" + shown(p.input_tokens || 0) + " in, " + shown(p.output_tokens || 0) + " out) · " +
        money(isNumber(p.total_cost_usd) ? p.total_cost_usd : 0) + " · " + duration(p.duration_ms || 0) + " · " +
        plural(isNumber(p.tools_invoked) ? p.tools_invoked : 0, "tool call");
    },
    STREAM_END: () => { state.ended = true; if (state.source) state.source.close(); loadTasks(); },
  };
  function onEvent(e) {
    if (e.seq <= state.lastSeq) return;
    state.lastSeq = e.seq;
    const handle = handlers[e.type];
    if (handle) handle(e);
  }

  // -- the stream: EventSource with a ticket, resumed after any drop ---------------------
  async function streamUrl(wf) {
    let url = "/api/v1/stream/sse?workflow_id=" + encodeURIComponent(wf);
    if (state.auth === "required") {
      const t = await api("POST", "/api/v1/stream/ticket", { workflow_id: wf });
      url += "&ticket=" + encodeURIComponent(t.ticket);
    }
    if (state.lastSeq) url += "&last_event_id=" + state.lastSeq;
    return url;
  }
  async function connect(wf) {
    if (state.source) state.source.close();
    let url;
    try { url = await streamUrl(wf); } catch (err) { toast(err.message); return; }
    if (wf !== state.wf) return;
    const source = new EventSource(url);
    state.source = source;
    source.onmessage = null;
    const listen = (type) => source.addEventListener(type, (m) => onEvent(JSON.parse(m.data)));
    Object.keys(handlers).concat(["AGENT_STARTED", "AGENT_COMPLETED", "WAITING"]).forEach(listen);
    source.addEventListener("error", () => {
      // EventSource retries by itself unless the server refused (a ticket can expire):
      // then open a fresh one from the last seq seen.
      if (source.readyState === EventSource.CLOSED && !state.ended && wf === state.wf) setTimeout(() => connect(wf), 1000);
    });
  }
  function watch(wf) {
    if (state.source) state.source.close();
    Object.assign(state, { wf: wf, lastSeq: 0, answer: "", tools: {}, approvals: {}, ended: false, source: null });
    spent = fresh();
    $("timeline").replaceChildren(); $("answer").hidden = true; $("answer").replaceChildren(); $("usage").hidden = true;
    showSpent();
    $("run").hidden = false; $("run-id").textContent = wf; $("run-query").textContent = ""; setStatus("pending");
    if (location.hash !== "#" + wf) history.replaceState(null, "", "#" + wf);
    connect(wf);
  }

  // -- forms and lists -------------------------------------------------------------------
  async function loadTasks() {
    try {
      state.tasks = (await api("GET", "/api/v1/tasks?limit=50")).tasks;
      showTasks();
    } catch (err) { /* no key yet */ }
  }
  // The run list, narrowed to the status picked above it.
  function showTasks() {
    const wanted = $("task-filter").value;
    const shownTasks = state.tasks.filter((t) => !wanted || t.status === wanted);
    $("tasks").replaceChildren(...shownTasks.map((t) => node("li", {}, node("a", { href: "#" + shown(t.workflow_id) },
      shown(t.query) + " ", node("span", { className: "status " + shown(t.status) }, shown(t.status))))));
  }
  $("task-filter").addEventListener("change", showTasks);
  async function loadSessions() {
    try {
      const data = await api("GET", "/api/v1/sessions?limit=20");
      $("sessions").replaceChildren(...data.sessions.map((s) => node("li", {}, node("a",
        { href: "#", dataset: { session: shown(s.session_id), title: shown(s.title) } }, shown(s.title || s.session_id)))));
    } catch (err) { /* no key yet */ }
  }
  // The next task joins this session, so the agent sees the conversation so far.
  function continueSession(id, title) {
    state.session = id;
    $("session-note").hidden = !id;
    $("session-title").textContent = title || id || "";
  }
  $("sessions").addEventListener("click", async (ev) => {
    const link = ev.target.closest("a[data-session]");
    if (!link) return;
    ev.preventDefault();
    continueSession(link.dataset.session, link.dataset.title);
    try {
      const session = await api("GET", "/api/v1/sessions/" + encodeURIComponent(link.dataset.session));
      const last = session.turns.filter((t) => t.workflow_id).pop();
      if (last) watch(last.workflow_id);
    } catch (err) { toast(err.message); }
  });
  $("new-session").addEventListener("click", () => continueSession("", ""));
  // Ctrl+Enter (Cmd+Enter on a Mac) runs the task; Enter alone is a new line.
  $("query").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); $("task-form").requestSubmit(); }
  });
  $("task-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const query = $("query").value.trim();
    if (!query) return;
    try {
      const body = { query: query };
      if (state.session) body.session_id = state.session;
      const created = await api("POST", "/api/v1/tasks", body);
      continueSession(created.session_id, state.session ? $("session-title").textContent : query);
      watch(created.workflow_id);
      loadTasks();
      loadSessions();
    } catch (err) { toast(err.message); }
  });
  document.querySelectorAll(".controls button").forEach((b) => b.addEventListener("click", () => {
    api("POST", "/api/v1/tasks/" + encodeURIComponent(state.wf) + "/" + b.dataset.action, {})
      .then((r) => item("notice", b.dataset.action + " requested")).catch((err) => toast(err.message));
  }));
  $("interrupt-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const message = $("interrupt").value.trim();
    if (!message) return;
    api("POST", "/api/v1/tasks/" + encodeURIComponent(state.wf) + "/interrupt", { message: message })
      .then(() => { $("interrupt").value = ""; }).catch((err) => toast(err.message));
  });
  $("key-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.key = $("api-key").value.trim();
    sessionStorage.setItem("shuttle.apiKey", state.key);
    loadTasks();
    loadSessions();
    if (state.wf) watch(state.wf);
  });
  window.addEventListener("hashchange", () => { const wf = location.hash.slice(1); if (wf && wf !== state.wf) watch(wf); });

  fetch("/api/v1/config").then((r) => r.json()).then((config) => {
    state.auth = config.auth;
    if (config.auth === "required") { $("key-form").hidden = false; $("api-key").value = state.key; }
    else $("auth-note").textContent = "authentication off (local use)";
    loadTasks();
    loadSessions();
    const wf = location.hash.slice(1);
    if (wf) watch(wf);
  });
})();
