// The notifications (#notifications?agent=&task=&kind=): the newest ones that pass the filters,
// then each new one as the stream brings it. The stream says first where its notifications
// start (`hello`); the older ones are read back from there, so none is missed or shown twice.
"use strict";
(() => {
  const S = Shepherd;
  const el = S.el;
  const MAX_SHOWN = 500;
  let params = "";
  // the stream the shown filters asked for (null while it is being chosen): what an older
  // stream still brings, under other filters, is not shown
  let wanted = null;

  function who(n) {
    if (n.sender_name || n.agent_name) return n.sender_name || n.agent_name;
    const r = (n.results || [])[0];
    return r ? r.agent_name || r.agent_id : n.agent_id || "";
  }
  function text(n) {
    switch (n.kind) {
      case "task_completion":
        return (n.results || []).map((r) => r.task_id + " " + r.status + (r.text ? ": " + r.text : "") + (r.error ? ": " + r.error : "")).join("; ");
      case "agent_message": return (n.expects_reply ? "asks: " : "says: ") + n.content;
      case "notice": return n.text;
      case "stale_wait": return "waits on " + n.recipient_name + " for " + S.ago(n.age_s) + ": " + n.question;
      case "wait_cycle": return (n.cycle || []).join(" → ");
      case "watchdog_alert": return n.confidence + ": " + (n.reasons || []).join("; ");
      default: return "";
    }
  }
  function item(n) {
    const task = n.task_id || ((n.results || [])[0] || {}).task_id;
    return el("li", {"data-kind": n.kind, "data-code": n.code || null, "data-task": task || null},
      el("span", {class: "when"}, S.when(n.created_at) + " "),
      el("strong", {}, n.kind + (n.code ? " " + n.code : "")), " ",
      who(n) ? who(n) + ": " : "",
      (text(n) || "").slice(0, 2000), " ",
      task ? el("a", {href: "#task/" + task, class: "muted"}, "task") : "",
      n.cut ? el("span", {class: "muted"}, " (cut)") : "");
  }
  async function backlog(offset) {
    const shownParams = params;
    const body = await S.get("/api/notifications?limit=100&before=" + offset + (params ? "&" + params : ""));
    if (!body || shownParams !== params) return;
    const list = S.$("#feed");
    list.append(...body.notifications.map(item));  // newest first, after any already streamed
    S.$("#feed-state").textContent = list.children.length + " shown" + (body.whole ? "" : " (older ones not read)");
    list.dataset.loaded = "1";
    list.dataset.query = shownParams;  // which filters the list shows (a page reads it)
  }
  S.$("#feed-form").onsubmit = (e) => {
    e.preventDefault();
    const f = e.target;
    const query = new URLSearchParams();
    for (const key of ["agent", "task", "kind"]) if (f[key].value.trim()) query.set(key, f[key].value.trim());
    location.hash = "notifications" + (query.toString() ? "?" + query : "");
  };
  S.view("feed", {
    show(arg) {
      const query = new URLSearchParams(arg.replace(/^\?/, ""));
      const f = S.$("#feed-form");
      for (const key of ["agent", "task", "kind"]) f[key].value = query.get(key) || "";
      params = query.toString();
      const list = S.$("#feed");
      list.replaceChildren();
      delete list.dataset.loaded;
      delete list.dataset.query;
      S.$("#feed-state").textContent = "";
      // the filters checked first: a refused one is shown, and the stream stays the board's
      wanted = null;
      const asked = params;
      S.get("/api/notifications?limit=0" + (params ? "&" + params : "")).then((body) => {
        if (asked !== params) return;  // the filters changed again meanwhile
        wanted = body ? params || "board_only=0" : "board_only=1";
        S.listen(wanted, wanted !== "board_only=1");  // the list was cleared: its hello reads it back
      });
    },
    hello(data, stream) {
      if (stream !== wanted) return;
      S.$("#feed").replaceChildren();
      backlog(data.offset);
    },
    notification(n, stream) {
      if (stream !== wanted) return;
      const list = S.$("#feed");
      list.prepend(item(n));
      while (list.children.length > MAX_SHOWN) list.lastChild.remove();
    },
    board_error(error) { S.showError(error); },
  });
})();
