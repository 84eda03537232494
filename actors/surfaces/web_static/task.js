// A task's page (#task/ID): its text, where it stands, its pending requests (answered here),
// its history, its result, the watchdog's verdict, its note and how to find its trace.
// Fetched again whenever the board changes or a notification about it comes.
"use strict";
(() => {
  const S = Shepherd;
  const el = S.el;
  let taskId = null, loading = false, again = false;

  function row(label, ...value) { return el("tr", {}, el("td", {class: "muted"}, label), el("td", {}, ...value)); }
  function section(title, ...kids) { return el("section", {"data-section": title}, el("h2", {}, title), ...kids); }
  function usage(u, b) {
    u = u || {}; b = b || {};
    const part = (name, used, limit, fmt) => name + " " + fmt(used || 0) + (limit !== undefined && limit !== null ? "/" + fmt(limit) : "");
    const count = (n) => Number(n).toLocaleString("en-US"), money = (n) => "$" + Number(n).toFixed(2);
    return [part("turns", u.turns, b.max_turns, count), part("tokens", u.tokens, b.max_tokens, count), part("cost", u.cost, b.max_cost, money)].join(" · ")
      + (b.max_minutes ? " · " + b.max_minutes + " min" : "");
  }
  function describe(n) {
    switch (n.kind) {
      case "task_completion":
        return (n.results || []).map((r) => (r.agent_name || r.agent_id) + ": " + r.status + (r.text ? ": " + r.text : "") + (r.error ? ": " + r.error : "")).join("; ");
      case "agent_message":
        return (n.sender_name || n.sender_id) + (n.expects_reply ? " asks: " : " says: ") + n.content;
      case "notice": return n.code + ": " + n.text;
      case "stale_wait": return n.agent_name + " waits on " + n.recipient_name + " for " + S.ago(n.age_s) + ": " + n.question;
      case "wait_cycle": return "wait cycle: " + (n.cycle || []).join(" → ");
      case "watchdog_alert": return "watchdog (" + n.confidence + "): " + (n.reasons || []).join("; ");
      default: return JSON.stringify(n).slice(0, 500);
    }
  }
  function result(r) {
    if (!r) return el("p", {class: "muted"}, "not settled yet");
    const table = el("table", {},
      row("status", el("strong", {"data-result-status": r.status}, r.status), " (rc " + r.return_code + ")"),
      row("settled", S.when(r.completed_at)));
    if (r.text) table.append(row("summary", r.text));
    if (r.error) table.append(row("error", r.error));
    if (r.reason) table.append(row("reason", r.reason));
    if (r.usage) table.append(row("spent", usage(r.usage, null)));
    const c = r.changes;
    if (c) {
      table.append(row("worktree", c.branch + " · " + c.count + " changed (since the " + (c.since || "task") + "'s start)"));
      if (c.files && c.files.length) table.append(row("files", c.files.join(", ") + (c.count > c.files.length ? " …" : "")));
      for (const o of c.overlaps || []) table.append(row("overlap", o.agent + " (" + o.branch + "): " + o.files.join(", ")));
      if (c.error) table.append(row("git", c.error));
    }
    const known = new Set(["task_id", "agent_id", "agent_name", "status", "ok", "return_code", "completed_at", "text", "error", "description", "reason", "usage", "changes"]);
    for (const [key, value] of Object.entries(r)) {
      if (!known.has(key) && value !== null) table.append(row(key, el("pre", {}, JSON.stringify(value, null, 1))));
    }
    return table;
  }
  function render(t) {
    const root = S.$("#task");
    const status = t.status || {};
    const head = el("table", {},
      row("task", el("code", {}, t.task_id)),
      row("state", el("strong", {"data-task-state": t.state || ""}, t.state || "unknown")),
      row("agent", t.agent.name ? el("a", {href: "#notifications?agent=" + encodeURIComponent(t.agent.name)}, t.agent.name) : (t.agent.note || "")),
      row("trace", el("code", {"data-trace-id": t.trace.trace_id}, t.trace.trace_id),
        " · its spans carry " + t.trace.attribute + " = " + t.trace.value
          + (t.trace.exported ? "" : " (this session exports no traces: serve --otel)")));
    if (status.created_at) head.append(row("created", S.when(status.created_at)));
    if (status.waiting_since) head.append(row("waiting", el("span", {"data-since": status.waiting_since})));
    if (status.task_id) head.append(row("usage", usage(status.usage, status.budget)));
    const parts = [el("h2", {}, "Task"), head, section("Text", el("pre", {class: "text"}, t.description || ""))];
    if (status.task_id && !t.result) {
      const reason = el("input", {name: "reason", size: 30, placeholder: "why (optional)"});
      const cancel = el("button", {"data-cancel": t.task_id}, "cancel the task");
      cancel.onclick = () => S.act("cancel", {task_id: t.task_id, reason: reason.value || null}).then(() => load());
      parts.push(el("p", {}, reason, " ", cancel));
    }
    const pending = (status.pending_requests || []).filter((r) => r.state === "pending");
    if (pending.length) {
      parts.push(section("Pending requests", ...pending.map((r) => r.target_id === S.PARENT_ID
        ? S.requestNode({...r, agent: t.agent.name, agent_id: t.agent.agent_id})
        : el("div", {class: "request"}, "asked " + r.target_id + ": " + r.question))));
    }
    const log = t.note.log.map((line) => el("li", {}, line));
    const notes = t.history.notifications.map((n) => el("li", {"data-kind": n.kind},
      el("span", {class: "when"}, S.when(n.created_at) + " "), describe(n)));
    parts.push(section("History",
      log.length ? el("ul", {}, ...log) : el("p", {class: "muted"}, "no question asked"),
      notes.length ? el("ul", {}, ...notes) : el("p", {class: "muted"}, "no notification about it"),
      t.history.whole ? "" : el("p", {class: "muted"}, "(older notifications not read)")));
    parts.push(section("Result", result(t.result)));
    const w = t.watchdog;
    if (w) {
      parts.push(section("Watchdog", w.error ? el("p", {}, w.error.code + ": " + w.error.message)
        : el("p", {"data-verdict": w.confidence}, (w.likely_stuck ? "likely stuck" : "not stuck") + " (confidence " + w.confidence + ", " + w.calls + " calls)"
          + ((w.reasons || []).length ? ": " + w.reasons.join("; ") : ""))));
    }
    if (t.note.text !== null) {
      parts.push(section("Note", el("pre", {}, t.note.text + (t.note.cut ? "\n… (cut)" : ""))));
    }
    root.replaceChildren(...parts);
    root.dataset.task = t.task_id;
    root.dataset.state = t.state || "";
    S.tick();
  }
  async function load() {
    if (!taskId) return;
    if (loading) { again = true; return; }
    loading = true;
    try {
      do {
        again = false;
        const shownId = taskId;
        const body = await S.get("/api/task/" + encodeURIComponent(shownId));
        if (body && shownId === taskId) render(body);
        else if (!body) S.$("#task").replaceChildren();
      } while (again);
    } finally { loading = false; }
  }
  S.view("task", {
    show(id) {
      taskId = id;
      S.$("#task").replaceChildren();
      // a stream filtered on the task, when the id is one (a bad id is refused by the page's load)
      S.listen(/^shepherd-task-[0-9a-f]{8,64}$/.test(id) ? "task=" + id : "board_only=1");
      load();
    },
    board() { load(); },
    notification() { load(); },
  });
})();
