// Suggestions page: the org's suggestions with their state, dismiss with a reason (servers
// that have the route), open the linked approval.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  async function dismiss(s, reason) {
    const r = await C.api("POST", `/v1/suggestions/${encodeURIComponent(s.id)}/dismiss`, { body: { reason } });
    if (r.ok) { await C.route(); C.flash(`Dismissed: ${s.title}`, "ok"); }
    else if (r.status === 404 && r.body && !r.body.field && /no such route/.test(r.body.detail || "")) {
      C.flash("This server cannot dismiss suggestions yet (no /dismiss route).", "error");
    } else C.flash("Could not dismiss: " + C.problem(r), "error");
  }

  function card(s, approval) {
    const state = s.state || s.status;
    const open = !["dismissed", "acted", "expired"].includes(state);
    let form = null;
    if (open && C.can("reviewer")) {
      const fid = "dismiss-" + s.id;
      const input = h("input", { id: fid, name: "reason", required: true, maxlength: 500 });
      form = h("form", { class: "inline", onsubmit: async (e) => {
        e.preventDefault();
        if (!input.value.trim()) { input.focus(); return; }
        await dismiss(s, input.value.trim());
      } }, h("label", { for: fid }, "Reason to dismiss"), input, h("button", { type: "submit" }, "Dismiss"));
    }
    return h("article", { class: "card", "aria-labelledby": "s-" + s.id },
      h("h2", { id: "s-" + s.id }, s.title),
      h("p", {}, s.message),
      C.facts([["state", C.badge(state)], ["night", s.night], ["kind", s.kind],
        ["document", s.document_id ? h("a", { href: "#/documents/" + encodeURIComponent(s.document_id) }, C.short(s.document_id)) : null],
        ["approval", approval ? h("a", { href: "#/approvals/" + encodeURIComponent(approval.id) },
          `Open approval: ${C.actionWords(approval)} (${approval.status})`) : null],
        ["run", s.run_id ? h("a", { href: "#/runs/" + encodeURIComponent(s.run_id) }, C.short(s.run_id)) : null]]),
      s.proposed_action ? h("details", {}, h("summary", {}, "Proposed action"), h("pre", {}, C.json(s.proposed_action))) : null,
      form);
  }

  C.pages.suggestions = async function suggestions() {
    const [r, a] = await Promise.all([C.api("GET", "/v1/suggestions?limit=100"), C.api("GET", "/v1/approvals?limit=200")]);
    if (!r.ok) return C.page("Suggestions", h("p", { class: "error-text" }, C.problem(r)));
    const bySuggestion = new Map();
    for (const x of (a.ok ? a.body.items : [])) if (x.suggestion_id && !bySuggestion.has(x.suggestion_id)) bySuggestion.set(x.suggestion_id, x);
    C.page("Suggestions", r.body.items.length
      ? h("div", {}, r.body.items.map((s) => card(s, bySuggestion.get(s.id))))
      : h("p", { class: "muted" }, "No suggestions yet (the nightly job writes them)."));
  };
})();
