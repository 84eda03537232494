// The board: lanes of cards a page at a time (each count that of the whole session), the inbox
// of requests to the parent, and the delegate and message forms. Drawn again on each `board`
// event whose version is newer than the one shown.
"use strict";
(() => {
  const S = Shepherd;
  const el = S.el;
  const TITLES = {needs_parent: "Needs the parent", working: "Working", waiting_peer: "Waiting on a peer", queued: "Queued for a slot", idle: "Idle", exited: "Exited"};
  const PAGE = 50;
  const offsets = {needs_parent: 0, working: 0, waiting_peer: 0, queued: 0, idle: 0, exited: 0};
  let inboxOffset = 0, shown = -1, loading = false, again = false, inboxShown = "";

  function number(n) { return Number(n || 0).toLocaleString("en-US"); }
  function money(n) { return "$" + Number(n || 0).toFixed(2); }
  // "used/limit", marked when the limit is reached
  function beside(label, used, limit, fmt) {
    const text = label + " " + fmt(used) + (limit !== null && limit !== undefined ? "/" + fmt(limit) : "");
    const over = limit !== null && limit !== undefined && used >= limit;
    return el("span", {class: over ? "over" : null}, text);
  }
  function card(c) {
    const task = c.task;
    const node = el("div", {class: "card", "data-agent": c.name, "data-agent-id": c.agent_id, "data-lane": c.lane,
      "data-task": task ? task.task_id : null},
      el("span", {class: "since", "data-since": c.since || "", title: "time in this lane"}),
      el("div", {class: "name"}, c.name + " ", el("span", {class: "meta"}, c.process_state || "")));
    if (task) {
      node.append(el("div", {class: "meta"}, el("a", {href: "#task/" + task.task_id, "data-task-link": task.task_id},
        (task.state || "") + (task.queue_place ? " #" + task.queue_place : "") + " · " + task.task_id)));
      node.append(el("div", {class: "text"}, task.description || ""));
      if (task.result) node.append(el("div", {class: "meta"}, "result: " + task.result.status + (task.result.text ? ": " + task.result.text : "")));
    }
    const u = c.usage || {}, b = c.budget || {};
    node.append(el("div", {class: "numbers"},
      beside("turns", u.turns, b.max_turns, number), " · ",
      beside("tokens", u.tokens, b.max_tokens, number), " · ",
      beside("cost", u.cost, b.max_cost, money),
      b.max_minutes ? " · " + b.max_minutes + " min" : ""));
    const w = c.watchdog;
    node.append(el("div", {class: "watchdog" + (w ? " alert" : ""), "data-watchdog": w ? w.confidence : "none"},
      w ? "watchdog: " + w.confidence + " (" + S.when(w.at) + "): " + (w.reasons || []).join("; ") : "watchdog: no alert"));
    const t = c.worktree;
    if (t) {
      let text = "worktree " + t.branch + (t.changed_files !== null && t.changed_files !== undefined ? " · " + t.changed_files + " changed" : "");
      if (t.files && t.files.length) text += ": " + t.files.join(", ") + (t.files_count > t.files.length ? " …" : "");
      for (const o of t.overlaps || []) text += " · overlaps " + o.agent + " (" + o.count + "): " + o.files.join(", ");
      if (t.overlap_agents) text += " · overlaps " + t.overlap_agents + " agents";
      node.append(el("div", {class: "worktree"}, text));
    }
    if (task && !task.result) {
      const b2 = el("button", {"data-cancel": task.task_id}, "cancel");
      b2.onclick = () => S.act("cancel", {task_id: task.task_id, reason: "cancelled from the board"}).then(load);
      node.append(b2, " ");
    }
    if (c.lane !== "exited") {
      const x = el("button", {"data-close": c.name}, "close");
      x.onclick = () => S.act("close", {agent: c.agent_id}).then(load);
      node.append(x);
    }
    return node;
  }
  function pager(count, offset, page, go, key) {
    const node = el("div", {class: "pager", "data-pager": key});
    if (count <= page) return node;
    node.append((offset + 1) + "–" + Math.min(offset + page, count) + " of " + number(count) + " ");
    if (offset > 0) {
      const prev = el("button", {"data-prev": key}, "‹ prev");
      prev.onclick = () => go(Math.max(0, offset - page));
      node.append(prev, " ");
    }
    if (offset + page < count) {
      const next = el("button", {"data-next": key}, "next ›");
      next.onclick = () => go(offset + page);
      node.append(next);
    }
    return node;
  }
  function render(body) {
    S.setNow(body.now);
    const board = S.$("#board");
    const lanes = [];
    for (const lane of Object.keys(TITLES)) {
      const count = body.counts[lane] || 0;
      const part = body.lanes[lane];
      const node = el("div", {class: "lane", id: "lane-" + lane, "data-count": count},
        el("h2", {}, TITLES[lane] + " (" + number(count) + ")"));
      for (const c of part.cards) node.append(card(c));
      node.append(pager(count, part.offset, PAGE, (o) => { offsets[lane] = o; load(); }, lane));
      lanes.push(node);
    }
    board.replaceChildren(...lanes);
    // the inbox is drawn again only when it changed: an answer being typed stays
    const inbox = JSON.stringify(body.inbox);
    if (inbox !== inboxShown) {
      inboxShown = inbox;
      S.$("#requests").replaceChildren(...body.inbox.requests.map(S.requestNode));
      S.$("#inbox-count").textContent = "(" + number(body.inbox.count) + ")";
      S.$("#inbox-pager").replaceChildren(pager(body.inbox.count, body.inbox.offset, PAGE, (o) => { inboxOffset = o; load(); }, "inbox"));
    }
    const s = body.summary || {};
    S.$("#summary").textContent = number(s.agents) + " agents" + (s.usage ? " · " + number(s.usage.tokens) + " tokens · " + money(s.usage.cost) : "")
      + (body.error ? " · stale: " + body.error.code : "");
    shown = body.version;
    S.tick();
    document.body.dataset.version = String(body.version);
    if (document.body.dataset.ready !== "1") {
      document.body.dataset.ready = "1";
      performance.mark("board-painted");
    }
  }
  async function load() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      do {
        again = false;
        const params = new URLSearchParams();
        for (const [lane, offset] of Object.entries(offsets)) if (offset) params.set(lane, offset);
        if (inboxOffset) params.set("inbox", inboxOffset);
        const body = await S.get("/api/board?" + params);
        if (body && body.version !== undefined) render(body);
      } while (again);
    } finally { loading = false; }
  }
  S.$("#delegate-form").onsubmit = (e) => {
    e.preventDefault();
    const f = e.target;
    const fields = {target: f.target.value, task: f.task.value};
    for (const key of ["max_turns", "max_tokens", "max_cost"]) {
      const value = S.typed(f[key].value);
      if (value !== null) fields[key] = value;
    }
    S.act("delegate", fields).then(load);
  };
  S.$("#message-form").onsubmit = (e) => {
    e.preventDefault();
    const f = e.target;
    const fields = {target: f.target.value, message: f.message.value};
    if (f.expects_reply.checked) fields.expects_reply = true;
    if (f.steer.checked) fields.steer = true;
    S.act("message", fields).then((body) => { if (!body.error) f.message.value = ""; });
  };
  S.view("board", {
    show() { S.listen("board_only=1"); load(); },
    hello(data) { if (data.version !== shown) load(); },
    board(data) { if (data.version !== shown) load(); },
    board_error(error) { S.showError(error); },
  });
})();
