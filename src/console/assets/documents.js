// Documents page: the org's documents; one document's proposal beside its text (schema
// fields with the extracted values, the prompt, the run) with accept/reject for reviewers.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const STATUSES = ["", "none", "queued", "running", "proposed", "accepted", "rejected", "failed", "skipped"];

  async function list() {
    const status = new URLSearchParams(location.hash.split("?")[1] || "").get("status") || "";
    const r = await C.api("GET", "/v1/documents?limit=100" + (status ? "&status=" + encodeURIComponent(status) : ""));
    if (!r.ok) return C.page("Documents", h("p", { class: "error-text" }, C.problem(r)));
    const select = h("select", { id: "doc-status", name: "status" },
      STATUSES.map((s) => h("option", { value: s, selected: s === status }, s || "any")));
    const filter = h("form", { class: "inline", onsubmit: (e) => {
      e.preventDefault();
      location.hash = "#/documents" + (select.value ? "?status=" + encodeURIComponent(select.value) : "");
    } }, h("label", { for: "doc-status" }, "Auto-create status"), select, h("button", { type: "submit" }, "Filter"));
    C.page("Documents", filter,
      C.table("Documents", ["name", "auto-create", "created", "updated"],
        r.body.items.map((d) => [
          h("a", { href: "#/documents/" + encodeURIComponent(d.id) }, d.name),
          C.badge(d.auto_create_status), C.fmtTime(d.created_at), C.fmtTime(d.updated_at)]),
        "No documents."));
  }

  async function decide(id, accept) {
    const r = await C.api("POST", `/v1/documents/${encodeURIComponent(id)}/${accept ? "accept" : "reject"}`);
    if (r.ok) {
      await C.route();
      C.flash(accept ? "Proposal accepted: schema and prompt are active." : "Proposal rejected: its artifacts were removed.", "ok");
    } else C.flash("Could not decide: " + C.problem(r), "error");
  }

  async function one(id) {
    const r = await C.api("GET", "/v1/documents/" + encodeURIComponent(id));
    if (!r.ok) return C.page("Document", h("p", { class: "error-text" }, C.problem(r)));
    const d = r.body;
    const values = (d.extraction && d.extraction.result) || {};
    const fields = C.table("Schema fields and extracted values", ["field", "type", "description", "extracted value"],
      (d.fields || []).map((f) => [h("code", {}, f.name), String(f.type === undefined ? "" : JSON.stringify(f.type)),
        f.description || "", h("span", { class: "value" }, values[f.name] === undefined ? "—" :
          typeof values[f.name] === "string" ? values[f.name] : JSON.stringify(values[f.name]))]),
      "No schema proposed.");
    const run = d.run;
    const actions = h("div", { class: "actions" });
    if (d.auto_create_status === "proposed") {
      if (C.can("reviewer")) {
        actions.append(C.button("Accept proposal", () => decide(id, true), { class: "primary", id: "accept-proposal" }),
          C.button("Reject proposal", () => decide(id, false), { class: "danger", id: "reject-proposal" }));
      } else actions.append(h("p", { class: "muted" }, "A reviewer key can accept or reject this proposal."));
    }
    const proposal = h("section", { "aria-labelledby": "proposal-title", id: "proposal" },
      h("h2", { id: "proposal-title" }, "Proposal"),
      C.facts([["auto-create", C.badge(d.auto_create_status)],
        d.error ? ["error", h("span", { class: "error-text" }, d.error)] : null,
        ["schema", d.schema ? `${d.schema.name} (${d.schema.status})` : null],
        ["extraction", d.extraction ? d.extraction.status : null],
        ["run", run ? h("a", { href: "#/runs/" + encodeURIComponent(run.id) },
          `${C.short(run.id)} — ${run.status}${run.stop_reason ? " (" + run.stop_reason + ")" : ""}, ${run.tokens} tokens`) : null]]),
      actions,
      h("h3", {}, "Schema fields and extracted values"), fields,
      h("h3", {}, "Prompt"), d.prompt ? [h("p", { class: "muted" }, `${d.prompt.name} (${d.prompt.status})`),
        h("pre", { id: "prompt-text" }, d.prompt.content)] : h("p", { class: "muted" }, "No prompt proposed."));
    const text = h("section", { "aria-labelledby": "text-title" },
      h("h2", { id: "text-title" }, "Document text"),
      d.text_truncated ? h("p", { class: "muted" }, `First 200,000 of ${d.text_chars} characters.`) : null,
      h("pre", { id: "document-text" }, d.text === undefined ? "(this server does not return the text)" : d.text || "(empty)"));
    C.page("Document: " + d.name, h("p", {}, h("a", { href: "#/documents" }, "← all documents")),
      h("div", { class: "side-by-side" }, text, proposal));
  }

  C.pages.documents = (id) => (id ? one(id) : list());
})();
