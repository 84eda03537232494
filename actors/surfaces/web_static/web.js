// What every view of the board shares: the token, requests and actions, the event stream,
// the views and their routes (#board, #task/ID, #notifications?agent=&task=&kind=).
// Text from the session is always put in text nodes, never parsed as HTML.
"use strict";
const Shepherd = (() => {
  const TOKEN = new URLSearchParams(location.search).get("token") || "";
  const PARENT_ID = document.body.dataset.parent;
  const $ = (sel, root) => (root || document).querySelector(sel);
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== null && v !== undefined) node.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) node.append(kid);
    return node;
  }
  function showError(error) {
    $("#error").textContent = error ? error.code + ": " + error.message : "";
  }
  async function get(path) {
    try {
      const answer = await fetch(path, {headers: {"x-shepherd-token": TOKEN}});
      const body = await answer.json();
      if (body.error && !body.version) { showError(body.error); return null; }
      return body;
    } catch (err) {
      showError({code: "session_unavailable", message: String(err)});
      return null;
    }
  }
  async function act(op, fields) {
    let body;
    try {
      const answer = await fetch("/api/op/" + op, {
        method: "POST",
        headers: {"content-type": "application/json", "x-shepherd-token": TOKEN},
        body: JSON.stringify(fields),
      });
      body = await answer.json();
    } catch (err) {
      body = {error: {code: "session_unavailable", message: String(err)}};
    }
    showError(body.error || null);
    document.body.dataset.acted = String(Number(document.body.dataset.acted || 0) + 1);
    return body;
  }
  // a number typed in a form: a number when it reads as one, else the text (the table refuses it)
  function typed(text) {
    const value = (text || "").trim();
    if (value === "") return null;
    return /^-?\d+(\.\d+)?$/.test(value) ? Number(value) : value;
  }
  function ago(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
    const s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }
  function when(epoch) {
    return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
  }
  // the session's clock, as the last answer told it (time in state is counted on it)
  let clockOffset = 0;
  function setNow(now) { if (now) clockOffset = now - Date.now() / 1000; }
  function now() { return Date.now() / 1000 + clockOffset; }
  function tick() {
    for (const node of document.querySelectorAll("[data-since]")) {
      const since = Number(node.dataset.since);
      node.textContent = since ? ago(now() - since) : "";
    }
  }
  setInterval(tick, 1000);

  // one request to the parent: approve / deny with a reason, or reply (the CLI's operations)
  function requestNode(req) {
    const id = req.request_id;
    const node = el("div", {class: "request", "data-request": id},
      el("strong", {}, (req.agent || "") + " (" + (req.kind || "question") + "): "),
      (req.question || "").slice(0, 2000), " ");
    if (req.task_id) node.append(el("a", {href: "#task/" + req.task_id, class: "muted"}, "task"), " ");
    const input = el("input", {name: "answer", size: 30, "data-answer": id,
      placeholder: req.kind === "approval" ? "note or reason" : "your reply"});
    node.append(input);
    if (req.kind === "approval") {
      const ok = el("button", {"data-approve": id}, "approve");
      ok.onclick = () => act("approve", {request_id: id, note: input.value || null});
      const no = el("button", {"data-deny": id}, "deny");
      no.onclick = () => act("deny", {request_id: id, reason: input.value || "denied"});
      node.append(ok, no);
    } else {
      const r = el("button", {"data-reply": id}, "reply");
      r.onclick = () => act("message", {target: req.agent_id || req.agent, message: input.value, reply_to: id});
      node.append(r);
    }
    return node;
  }

  // the event stream: one per page, opened again with the view's filters (or ``again``: a view
  // that cleared what it shows needs the stream's ``hello`` to read it back)
  const views = {};
  let current = null, source = null, streamParams = null;
  function listen(params, again = false) {
    if (source && params === streamParams && !again) return;
    if (source) source.close();
    streamParams = params;
    source = new EventSource("/api/events?" + params);
    const on = (name) => source.addEventListener(name, (e) => {
      const view = views[current];
      if (view && view[name]) view[name](JSON.parse(e.data), params);  // and the stream's filters
    });
    for (const name of ["hello", "board", "notification", "board_error"]) on(name);
  }
  function view(name, handlers) { views[name] = handlers; }
  function route() {
    const hash = location.hash.slice(1);
    let name = "board", arg = "";
    if (hash.startsWith("task/")) { name = "task"; arg = decodeURIComponent(hash.slice(5)); }
    else if (hash.startsWith("notifications")) { name = "feed"; arg = hash.slice(14); }
    if (!views[name]) name = "board";
    for (const key of Object.keys(views)) $("#view-" + key).hidden = key !== name;
    current = name;
    showError(null);
    views[name].show(arg);
  }
  window.addEventListener("hashchange", route);
  window.addEventListener("DOMContentLoaded", route);
  return {TOKEN, PARENT_ID, $, el, get, act, typed, ago, when, setNow, now, tick, requestNode, listen, view, showError};
})();
