// Documents page: the org's documents and, for uploaders, an upload form whose auto-create may
// start from an existing schema, prompt and tags; one document's proposal beside its text
// (schema fields with the extracted values, the prompt, the run) with accept/reject and refine
// (instructions for a new run on the proposal) for reviewers.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const STATUSES = ["", "none", "queued", "running", "proposed", "accepted", "rejected", "failed", "skipped"];

  // The choices of a start-from list (GET /v1/schemas, /v1/prompts, /v1/tags: their first
  // page of 200, newest first); a list that fails is said beside its field.
  async function choices(path) {
    const r = await C.api("GET", path + "?limit=200");
    return r.ok ? { items: r.body.items, error: null } : { items: [], error: C.problem(r) };
  }

  const version = (x) => `${x.name} (v${x.version}, ${x.status})`;

  async function uploadForm() {
    const [schemas, prompts, tags] = await Promise.all(
      ["/v1/schemas", "/v1/prompts", "/v1/tags"].map(choices));
    const name = h("input", { id: "upload-name", name: "name", required: true, maxlength: 500, autocomplete: "off" });
    const text = h("textarea", { id: "upload-text", name: "text", rows: 6, spellcheck: "false" });
    const auto = h("input", { id: "upload-auto", name: "auto_create", type: "checkbox", checked: true });
    const select = (id, items, none) => h("select", { id, name: id },
      h("option", { value: "" }, none), items.map((x) => h("option", { value: x.id }, version(x))));
    const schema = select("upload-schema", schemas.items, "none: a new schema");
    const prompt = select("upload-prompt", prompts.items, "none: a new prompt");
    const tagBoxes = tags.items.map((t) => h("input", { type: "checkbox", id: "upload-tag-" + t.id, value: t.id }));
    const note = (list) => (list.error ? h("p", { class: "error-text" }, "Could not list them: " + list.error) : null);
    const start = h("fieldset", { id: "upload-start" },
      h("legend", {}, "Start from existing (optional, with auto-create)"),
      h("label", { for: "upload-schema" }, "Schema"), schema, note(schemas),
      h("label", { for: "upload-prompt" }, "Prompt"), prompt, note(prompts),
      h("fieldset", { class: "tags" }, h("legend", {}, "Tags"),
        tagBoxes.length ? tags.items.map((t, i) => h("span", { class: "choice" }, tagBoxes[i],
          h("label", { for: tagBoxes[i].id }, t.name))) : h("p", { class: "muted" }, "The org has no tags."),
        note(tags)));
    auto.addEventListener("change", () => { start.disabled = !auto.checked; });
    const submit = h("button", { type: "submit", id: "upload-document", class: "primary" }, "Upload");
    const form = h("form", { class: "stack", id: "upload-form", onsubmit: async (e) => {
      e.preventDefault();
      const body = { name: name.value, text: text.value, auto_create: auto.checked };
      if (auto.checked) {
        if (schema.value) body.schema_id = schema.value;
        if (prompt.value) body.prompt_id = prompt.value;
        const picked = tagBoxes.filter((b) => b.checked).map((b) => b.value);
        if (picked.length) body.tag_ids = picked;
      }
      submit.disabled = true;
      try {
        const r = await C.api("POST", "/v1/documents", { body });
        if (!r.ok) return C.flash("Could not upload: " + C.problem(r), "error");
        await C.route();
        C.flash(`Uploaded ${r.body.name}: auto-create ${r.body.auto_create_status}` +
          (r.body.job_id === null || r.body.job_id === undefined ? "." : ` (job ${r.body.job_id}).`), "ok");
      } finally { submit.disabled = false; }
    } },
    h("label", { for: "upload-name" }, "Name"), name,
    h("label", { for: "upload-text" }, "Text"), text,
    h("span", { class: "choice" }, auto, h("label", { for: "upload-auto" }, "Auto-create a schema, prompt and extraction")),
    start, submit);
    return h("section", { "aria-labelledby": "upload-title" }, h("h2", { id: "upload-title" }, "Upload a document"), form);
  }

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
    C.page("Documents", C.can("uploader") ? await uploadForm() : null,
      h("h2", {}, "All documents"), filter,
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

  // Refine: the reviewer's instructions start a new run on the proposal (the document is
  // queued again); the API's problem (empty instructions, no proposal, a run already waiting)
  // is shown as it says it.
  function refineForm(id) {
    const text = h("textarea", { id: "refine-instructions", name: "instructions", rows: 3, maxlength: 2000,
      "aria-describedby": "refine-help" });
    const go = async () => {
      const r = await C.api("POST", `/v1/documents/${encodeURIComponent(id)}/refine`, { body: { instructions: text.value } });
      if (!r.ok) return C.flash("Could not refine: " + C.problem(r), "error");
      await C.route();
      C.flash(`Refine queued as job ${r.body.job_id}: the document is ${r.body.auto_create_status} until its run proposes again.`, "ok");
    };
    return h("div", { id: "refine" },
      h("h3", {}, "Refine"),
      h("p", { id: "refine-help", class: "muted" },
        "Say what to change (at most 2000 characters): a new run starts from this proposal and proposes new versions."),
      h("label", { for: "refine-instructions" }, "Instructions"), text,
      h("div", { class: "actions" }, C.button("Refine proposal", go, { id: "refine-proposal" })));
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
    const refinable = ["proposed", "accepted"].includes(d.auto_create_status) && C.can("reviewer");
    const proposal = h("section", { "aria-labelledby": "proposal-title", id: "proposal" },
      h("h2", { id: "proposal-title" }, "Proposal"),
      C.facts([["auto-create", C.badge(d.auto_create_status)],
        d.error ? ["error", h("span", { class: "error-text" }, d.error)] : null,
        ["schema", d.schema ? `${d.schema.name} (${d.schema.status})` : null],
        ["extraction", d.extraction ? d.extraction.status : null],
        ["run", run ? h("a", { href: "#/runs/" + encodeURIComponent(run.id) },
          `${C.short(run.id)} — ${run.status}${run.stop_reason ? " (" + run.stop_reason + ")" : ""}, ${run.tokens} tokens, ${C.fmtUsd(run.cost_usd)}`) : null],
        ["runs", h("a", { href: "#/runs?subject=" + encodeURIComponent(id), id: "document-runs" }, "every run of this document")]]),
      actions,
      refinable ? refineForm(id) : null,
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
