// agentd console, core: session, API calls, element builder, router, formatting.
// Every value from the API reaches the page as a text node (h() below) or an attribute set
// with setAttribute: nothing is parsed as HTML. The server also sends a Content-Security-Policy
// that forbids inline scripts.
"use strict";

const C = (window.Console = { pages: {}, me: null });
const KEY = "agentd.console.key";
const ROLES = ["reader", "uploader", "reviewer", "admin"];

// Builds an element: attrs (on* → listeners, otherwise attributes), children (strings and
// numbers become text nodes; null/false are skipped; arrays are flattened).
C.h = function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  const add = (c) => {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) return c.forEach(add);
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  };
  children.forEach(add);
  return el;
};
const h = C.h;

C.key = () => sessionStorage.getItem(KEY);
C.can = (role) => !!C.me && ROLES.indexOf(C.me.role) >= ROLES.indexOf(role);

// Calls the API: {status, ok, body, headers}. A 401 signs out.
C.api = async function api(method, path, opts = {}) {
  const headers = Object.assign({ Authorization: "Bearer " + C.key() }, opts.headers || {});
  let body;
  if (opts.body !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.body);
  }
  let res;
  try {
    res = await fetch(path, { method, headers, body, cache: "no-store" });
  } catch (e) {
    return { status: 0, ok: false, body: { title: "network error", detail: String(e) }, headers: new Headers() };
  }
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { json = { detail: text }; }
  if (res.status === 401 && !opts.signingIn) {
    C.signOut("Your key was refused (401): sign in again.");
  }
  return { status: res.status, ok: res.ok, body: json, headers: res.headers };
};

// A problem detail in words.
C.problem = function problem(r) {
  const b = r.body || {};
  const parts = [r.status ? String(r.status) : "", b.title || "", b.detail || ""].filter(Boolean);
  if (b.field) parts.push("(field: " + b.field + ")");
  return parts.join(" — ");
};

C.flash = function flash(text, kind) {
  const f = document.getElementById("flash");
  f.className = kind || "";
  f.textContent = text || "";
};

C.fmtTime = (t) => (t ? new Date(t).toLocaleString() : "—");
// Dollars as the API gives them (`cost_usd`, null when not known): six decimals under $1, four
// from $1 up, as the CLI prints them.
C.fmtUsd = (d) => (d === null || d === undefined ? "n/a" : "$" + d.toFixed(d >= 1 ? 4 : 6));
C.fmtSecs = function fmtSecs(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "—";
  const neg = s < 0;
  s = Math.abs(Math.round(s));
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60), sec = s % 60;
  const out = d ? `${d}d ${hh}h` : hh ? `${hh}h ${m}m` : m ? `${m}m ${sec}s` : `${sec}s`;
  return neg ? "-" + out : out;
};
C.json = (v) => JSON.stringify(v, null, 2);
C.badge = (s) => h("span", { class: "badge s-" + String(s || "none") }, s || "none");
C.short = (id) => String(id || "").slice(0, 8);

// A <table> from column heads and rows of cells (cells are h() children).
C.table = function table(caption, heads, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty || "Nothing here.");
  return h("table", {},
    caption ? h("caption", { class: "visually-hidden" }, caption) : null,
    h("thead", {}, h("tr", {}, heads.map((x) => h("th", { scope: "col", class: x.num ? "num" : null }, typeof x === "string" ? x : x.label)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) =>
      h("td", { class: heads[i] && heads[i].num ? "num" : null }, c))))));
};

C.facts = (pairs) => h("dl", { class: "facts" },
  pairs.filter((p) => p).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v === null || v === undefined || v === "" ? "—" : v)]));

// The nodes of children as h() adds them (arrays flattened, null/false skipped, strings as
// text): replaceChildren and append would print an array as "[object …],[object …]" and null
// as "null".
C.nodes = (...children) => [...h("div", {}, children).childNodes];

C.page = function page(title, ...children) {
  const p = document.getElementById("page");
  p.replaceChildren(h("h1", { id: "page-title" }, title), ...C.nodes(children));
  C.scrollers(p);
  document.title = title + " — agentd console";
};

// Every <pre> under root (they scroll past 32em, or sideways) takes the keyboard's focus, so a
// keyboard user can scroll it (axe: scrollable-region-focusable).
C.scrollers = (root) => root.querySelectorAll("pre").forEach((el) => el.setAttribute("tabindex", "0"));

// An SVG element: attributes set with setAttribute, children as nodes or text (never markup).
C.svg = function svg(tag, attrs, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) if (k !== null && k !== undefined) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
};

// The hash's query (#/page?a=1) as URLSearchParams.
C.query = () => new URLSearchParams((location.hash || "").split("?")[1] || "");

// A bar chart with a legend: `groups` are the x positions ({label, bars: [{value, class, title}]}),
// bars side by side (or stacked when `stacked`), optional `lines` ([{class, label, values}]) drawn
// over them on the same scale. Every shape has a <title>; the chart is role=img with a title and a
// description, and the caller puts the same figures in a table beside it. The scale's top is at
// least `floor` (default 1).
C.barChart = function barChart(o) {
  const svg = C.svg, W = o.width || 720, H = o.height || 180, pad = 28, n = o.groups.length || 1;
  const per = (g) => g.bars.map((b) => b.value);
  const heights = o.groups.map((g) => (o.stacked ? per(g).reduce((a, b) => a + b, 0) : Math.max(0, ...per(g))));
  const lineMax = Math.max(0, ...(o.lines || []).flatMap((l) => l.values));
  const max = Math.max(o.floor === undefined ? 1 : o.floor, ...heights, lineMax);
  const slot = (W - pad * 2) / n, k = o.stacked ? 1 : Math.max(1, ...o.groups.map((g) => g.bars.length));
  const bw = Math.max(2, (slot - 4) / k - 1);
  const y = (v) => H - pad - (v / max) * (H - pad * 2);
  const ids = { t: o.id + "-title", d: o.id + "-desc" };
  const root = svg("svg", Object.assign({ viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
    "aria-labelledby": `${ids.t} ${ids.d}`, width: "100%", id: o.id }, o.attrs || {}),
  svg("title", { id: ids.t }, o.title), svg("desc", { id: ids.d }, o.desc));
  root.append(svg("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#444" }),
    svg("text", { x: 2, y: pad }, o.fmtMax ? o.fmtMax(max) : String(max)), svg("text", { x: 2, y: H - pad }, "0"));
  const every = Math.max(1, Math.ceil(n / 8));
  o.groups.forEach((g, i) => {
    const x0 = pad + i * slot + 2;
    let base = 0;
    g.bars.forEach((b, j) => {
      const top = o.stacked ? base + b.value : b.value;
      const x = o.stacked ? x0 : x0 + j * (bw + 1);
      root.append(svg("rect", { x, y: y(top), width: o.stacked ? slot - 4 : bw, height: y(base) - y(top), class: b.class },
        svg("title", {}, b.title)));
      if (o.stacked) base = top;
    });
    if ((n - 1 - i) % every === 0) root.append(svg("text", { x: x0, y: H - pad + 14 }, g.label));
  });
  for (const l of o.lines || []) {
    const pts = l.values.map((v, i) => `${pad + i * slot + slot / 2},${y(v)}`).join(" ");
    root.append(svg("polyline", { points: pts, class: "line " + l.class }, svg("title", {}, l.label)));
  }
  let lx = W - pad;
  for (const it of [...(o.legend || [])].reverse()) {
    lx -= it.label.length * 6 + 20;
    root.append(it.line ? svg("line", { x1: lx, y1: 9, x2: lx + 10, y2: 9, class: "line " + it.class })
      : svg("rect", { x: lx, y: 4, width: 10, height: 10, class: it.class }),
    svg("text", { x: lx + 14, y: 13 }, it.label));
  }
  return root;
};

C.loading = () => document.getElementById("page").replaceChildren(h("p", { class: "muted" }, "Loading…"));

// A button that runs `fn` once at a time (disabled while it runs).
C.button = function button(label, fn, attrs) {
  const b = h("button", Object.assign({ type: "button" }, attrs || {}), label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try { await fn(); } finally { b.disabled = false; }
  });
  return b;
};

C.signOut = function signOut(message) {
  sessionStorage.removeItem(KEY);
  C.me = null;
  C.route(message);
};

async function signIn(ev) {
  ev.preventDefault();
  const input = document.getElementById("api-key");
  const key = input.value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY, key);
  const r = await C.api("GET", "/v1/me", { signingIn: true });
  if (!r.ok) {
    sessionStorage.removeItem(KEY);
    C.flash("Sign-in failed: " + C.problem(r), "error");
    input.focus();
    return;
  }
  input.value = "";
  C.me = r.body;
  C.flash("");
  if (!location.hash || location.hash === "#/") location.hash = C.can("admin") ? "#/queue" : "#/approvals";
  else C.route();
}

function showChrome(signedIn) {
  document.getElementById("sign-in").hidden = signedIn;
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("who").hidden = !signedIn;
  if (!signedIn) return;
  const me = C.me;
  document.getElementById("who-text").textContent =
    (me.org_name || me.org_id) + " · role " + me.role + " · key " + C.short(me.key_id);
  for (const li of document.querySelectorAll("#nav li[data-role]")) li.hidden = !C.can(li.dataset.role);
}

// Routes: #/<page>[/<id>].
C.route = async function route(message) {
  if (message) C.flash(message, "error");
  if (!C.key()) {
    showChrome(false);
    document.getElementById("page").replaceChildren();
    document.getElementById("api-key").focus();
    return;
  }
  if (!C.me) {
    const r = await C.api("GET", "/v1/me", { signingIn: true });
    if (!r.ok) return C.signOut("Sign in again: " + C.problem(r));
    C.me = r.body;
  }
  showChrome(true);
  const [, name, id] = (location.hash || "").split("?")[0].split("/");
  let page = name || (C.can("admin") ? "queue" : "approvals");
  const ADMIN_PAGES = ["queue", "settings", "webhooks", "keys"];
  if (!C.pages[page] || (ADMIN_PAGES.includes(page) && !C.can("admin"))) page = "approvals";
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.dataset.page === page) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  C.loading();
  try {
    await C.pages[page](id ? decodeURIComponent(id) : null);
  } catch (e) {
    C.page("Something went wrong", h("p", { class: "error-text" }, String(e)));
  }
  // After navigating, move focus to the new page's heading (screen readers announce it).
  const title = document.getElementById("page-title");
  if (title && C.moved) {
    title.setAttribute("tabindex", "-1");
    title.focus();
  }
  C.moved = false;
};

C.start = function start() {
  document.getElementById("sign-in-form").addEventListener("submit", signIn);
  document.getElementById("sign-out").addEventListener("click", () => C.signOut());
  window.addEventListener("hashchange", () => { C.flash(""); C.moved = true; C.route(); });
  C.route();
};
