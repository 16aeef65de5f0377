// Jobs page: the org's jobs (GET /v1/jobs), newest first, with its filters — kind, state,
// created range, document — kept in the address (#/jobs?kind=…&state=…), a page at a time
// ("Next page" follows next_cursor); admins retry a dead job or cancel a waiting or running one
// from its row. What the API refuses is shown as its problem says it.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const STATES = ["available", "running", "succeeded", "dead", "cancelled"];
  const FILTERS = ["kind", "state", "created_after", "created_before", "document"];

  // An RFC 3339 time as a datetime-local input shows it (the browser's time zone), and back.
  const pad2 = (n) => String(n).padStart(2, "0");
  function toLocalInput(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return "";
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}T${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  }
  function fromLocalInput(v) {
    if (!v) return "";
    const d = new Date(v);
    return Number.isNaN(d.getTime()) ? v : d.toISOString();
  }

  function go(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
    const s = q.toString();
    location.hash = "#/jobs" + (s ? "?" + s : "");
  }

  function filterForm(cur) {
    const field = (name, label, input) => h("div", { class: "field" }, h("label", { for: "jobs-" + name }, label), input);
    const kind = h("input", { id: "jobs-kind", name: "kind", value: cur.get("kind") || "", spellcheck: "false",
      placeholder: "any", size: 22, maxlength: 64 });
    const state = h("select", { id: "jobs-state", name: "state" }, h("option", { value: "" }, "any"),
      STATES.map((s) => h("option", { value: s, selected: cur.get("state") === s }, s)));
    const after = h("input", { id: "jobs-created_after", name: "created_after", type: "datetime-local",
      value: cur.get("created_after") ? toLocalInput(cur.get("created_after")) : "" });
    const before = h("input", { id: "jobs-created_before", name: "created_before", type: "datetime-local",
      value: cur.get("created_before") ? toLocalInput(cur.get("created_before")) : "" });
    const doc = h("input", { id: "jobs-document", name: "document", value: cur.get("document") || "", spellcheck: "false",
      placeholder: "a document id", size: 38, maxlength: 64 });
    return h("form", { class: "inline filters", id: "jobs-filter", onsubmit: (e) => {
      e.preventDefault();
      go({ kind: kind.value.trim(), state: state.value, created_after: fromLocalInput(after.value),
        created_before: fromLocalInput(before.value), document: doc.value.trim() });
    } },
    field("kind", "Kind", kind), field("state", "State", state), field("created_after", "Created from", after),
    field("created_before", "Created before", before), field("document", "Document", doc),
    h("button", { type: "submit", class: "primary", id: "jobs-apply" }, "Show"),
    h("button", { type: "button", id: "jobs-clear", onclick: () => go({}) }, "Clear"));
  }

  async function act(j, what) {
    const r = await C.api("POST", `/v1/jobs/${j.id}/${what}`);
    const done = what === "retry" ? "is ready again" : "is cancelled";
    if (!r.ok) return C.flash(`Could not ${what} job ${j.id}: ` + C.problem(r), "error");
    await C.route();
    C.flash(`Job ${j.id} ${done}.`, "ok");
  }

  function actions(j) {
    if (!C.can("admin")) return "—";
    if (j.state === "dead") {
      return C.button("Retry", () => act(j, "retry"), { "aria-label": `Retry job ${j.id}`, "data-job-retry": j.id });
    }
    if (j.state === "available" || j.state === "running") {
      return C.button("Cancel", () => act(j, "cancel"), { class: "danger", "aria-label": `Cancel job ${j.id}`, "data-job-cancel": j.id });
    }
    return "—";
  }

  C.pages.jobs = async function jobs() {
    const cur = C.query();
    const q = new URLSearchParams({ limit: "50" });
    for (const k of FILTERS) if (cur.get(k)) q.set(k, cur.get(k));
    if (cur.get("cursor")) q.set("cursor", cur.get("cursor"));
    const r = await C.api("GET", "/v1/jobs?" + q.toString());
    const form = filterForm(cur);
    const note = C.can("admin") ? null
      : h("p", { class: "muted" }, "An admin key can retry a dead job or cancel a waiting or running one here.");
    if (!r.ok) {
      return C.page("Jobs", form, h("p", { class: "error-text", id: "jobs-error" }, "The jobs could not be listed: " + C.problem(r)));
    }
    const items = r.body.items || [];
    const doc = (j) => (j.payload && typeof j.payload.document_id === "string"
      ? h("a", { href: "#/documents/" + encodeURIComponent(j.payload.document_id) }, C.short(j.payload.document_id)) : "—");
    const table = C.table("Jobs",
      [{ label: "job", num: true }, { label: "kind" }, { label: "state" }, { label: "attempts", num: true }, { label: "created" },
        { label: "started" }, { label: "finished" }, { label: "document" }, { label: "last error" }, { label: "action" }],
      items.map((j) => [String(j.id), j.kind, C.badge(j.state), `${j.attempt}/${j.max_attempts}`, C.fmtTime(j.created_at),
        C.fmtTime(j.started_at), C.fmtTime(j.finished_at), doc(j), j.last_error || "—", actions(j)]),
      cur.toString() ? "No job matches these filters." : "No jobs for this org yet.");
    const filtered = FILTERS.filter((k) => cur.get(k));
    const paging = h("div", { class: "actions" },
      cur.get("cursor") ? h("a", { href: "#/jobs" + (() => { const x = new URLSearchParams(cur); x.delete("cursor");
        const s = x.toString(); return s ? "?" + s : ""; })(), id: "jobs-first" }, "← first page") : null,
      r.body.next_cursor ? C.button("Next page", () => {
        const x = new URLSearchParams(cur); x.set("cursor", r.body.next_cursor); location.hash = "#/jobs?" + x.toString();
      }, { id: "jobs-next" }) : null);
    C.page("Jobs", form, note,
      h("p", { class: "muted", id: "jobs-summary" }, `${items.length} job(s) on this page` +
        (filtered.length ? ", filtered by " + filtered.join(", ") : "") + (r.body.next_cursor ? "; more on the next page." : ".")),
      table, paging);
  };
})();
