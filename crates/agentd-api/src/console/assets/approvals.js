// Approvals page: pending first (soonest to expire first), each with the action in words, the
// agent's reason, the arguments and the time left; one approval with its snapshot and history,
// approve (sending If-Match with the snapshot hash it was shown), possibly with edited
// arguments, or reject with a reason; stale
// ones show what changed. Fields added by newer servers (summary, rationale, decision_reason,
// edited) are shown when present.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  const short = (v) => {
    const s = typeof v === "string" ? v : JSON.stringify(v);
    return s.length > 80 ? s.slice(0, 77) + "…" : s;
  };

  // The action in words: the server's summary, else one built from the tool and arguments.
  C.actionWords = function actionWords(a) {
    if (a.summary) return a.summary;
    const act = a.action || {};
    const tool = String(act.tool || "action").replace(/_/g, " ");
    const args = Object.entries(act.args || {}).map(([k, v]) => `${k.replace(/_/g, " ")} ${short(v)}`);
    return tool.charAt(0).toUpperCase() + tool.slice(1) + (args.length ? ": " + args.join("; ") : "");
  };

  const timeLeft = (a) => {
    if (a.status !== "pending") return null;
    const secs = (new Date(a.expires_at).getTime() - Date.now()) / 1000;
    return secs > 0 ? C.fmtSecs(secs) + " left" : "expired (not swept yet)";
  };

  function changesTable(changes) {
    if (!changes || typeof changes !== "object") return null;
    // A side without the key (added or removed since) reads "(none)", not JSON's null.
    const side = (x) => (x === undefined || x === null ? h("span", { class: "muted" }, "(none)") : h("pre", {}, C.json(x)));
    const rows = Object.entries(changes).map(([k, v]) => [h("code", {}, k),
      side(v && v.before !== undefined ? v.before : v), side(v ? v.after : null)]);
    return h("section", { class: "changes", "aria-labelledby": "changes-title" },
      h("h3", { id: "changes-title" }, "What changed since it was proposed"),
      C.table("Changes", ["field", "when proposed", "now"], rows, "No details recorded."));
  }

  function card(a) {
    const left = timeLeft(a);
    return h("article", { class: "card " + a.status, "aria-labelledby": "a-" + a.id, "data-approval": a.id },
      h("h2", { id: "a-" + a.id }, h("a", { href: "#/approvals/" + encodeURIComponent(a.id) }, C.actionWords(a))),
      C.facts([["status", C.badge(a.status)], left ? ["time left", left] : null,
        ["agent's reason", a.rationale === undefined ? h("span", { class: "muted" }, "not recorded by this server") : a.rationale],
        a.decision_reason ? ["decision reason", a.decision_reason] : null,
        ["proposed", C.fmtTime(a.created_at)]]),
      h("details", {}, h("summary", {}, "Arguments"), h("pre", {}, C.json(a.action && a.action.args))));
  }

  async function list() {
    const [p, all] = await Promise.all([C.api("GET", "/v1/approvals?status=pending&limit=200"),
      C.api("GET", "/v1/approvals?limit=50")]);
    if (!p.ok || !all.ok) return C.page("Approvals", h("p", { class: "error-text" }, C.problem(p.ok ? all : p)));
    const pending = p.body.items.slice().sort((a, b) => new Date(a.expires_at) - new Date(b.expires_at));
    const rest = all.body.items.filter((a) => a.status !== "pending");
    C.page("Approvals",
      h("h2", {}, `Pending (${pending.length})`),
      pending.length ? h("div", { id: "pending" }, pending.map(card)) : h("p", { class: "muted" }, "Nothing waits for a decision."),
      h("h2", {}, "Recently decided"),
      rest.length ? h("div", { id: "decided" }, rest.map(card)) : h("p", { class: "muted" }, "None yet."));
  }

  async function approve(a, etag, args) {
    const opts = { headers: { "If-Match": etag } };
    if (args !== undefined) opts.body = { arguments: args };
    const r = await C.api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/approve`, opts);
    if (r.ok) {
      await C.route();
      C.flash(`Approved: ${C.actionWords(a)} — now ${r.body.approval.status}.`, "ok");
    } else if (r.status === 412) {
      await C.route();
      C.flash("The approval changed since you opened it; review it again (412).", "error");
    } else {
      await C.route();
      C.flash("Not executed: " + C.problem(r), "error");
      if (r.status === 409 && r.body.changes) document.getElementById("page").append(...C.nodes(changesTable(r.body.changes)));
    }
  }

  async function reject(a, reason) {
    let r = await C.api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/reject`, { body: { reason } });
    let note = "";
    if (r.status === 422 && r.body && r.body.field === "reason" && /unknown field/.test(r.body.detail || "")) {
      // A server without reject reasons: reject anyway and say the reason was not kept.
      r = await C.api("POST", `/v1/approvals/${encodeURIComponent(a.id)}/reject`);
      note = " (this server does not record reject reasons; the reason was not kept)";
    }
    if (r.ok) { await C.route(); C.flash("Rejected: nothing was executed" + note + ".", "ok"); }
    else C.flash("Could not reject: " + C.problem(r), "error");
  }

  async function one(id) {
    const r = await C.api("GET", "/v1/approvals/" + encodeURIComponent(id));
    if (!r.ok) return C.page("Approval", h("p", { class: "error-text" }, C.problem(r)));
    const a = r.body;
    const etag = r.headers.get("ETag") || `"${a.snapshot_hash}"`;
    const actions = h("div", { class: "actions" });
    if (a.status === "pending" && C.can("reviewer")) {
      const reason = h("textarea", { id: "reject-reason", name: "reason", required: true, maxlength: 500, minlength: 1 });
      const form = h("form", { class: "stack", id: "reject-form", onsubmit: async (e) => {
        e.preventDefault();
        const text = reason.value.trim();
        if (!text) { C.flash("Write a reason for rejecting.", "error"); reason.focus(); return; }
        form.querySelector("button").disabled = true;
        await reject(a, text);
      } }, h("label", { for: "reject-reason" }, "Reason for rejecting (required, up to 500 characters)"), reason,
        h("button", { type: "submit", class: "danger", id: "reject-approval" }, "Reject"));
      const edited = h("textarea", { id: "edit-args", name: "arguments", rows: 8, spellcheck: "false" }, C.json(a.action.args));
      const edit = h("details", { id: "edit" }, h("summary", {}, "Edit the arguments, then approve"),
        h("form", { class: "stack", onsubmit: async (e) => {
          e.preventDefault();
          let args;
          try { args = JSON.parse(edited.value); } catch (err) {
            C.flash("The arguments are not JSON: " + err.message, "error");
            return edited.focus();
          }
          await approve(a, etag, args);
        } }, h("label", { for: "edit-args" }, "Arguments (JSON; checked by the server against the tool's schema)"), edited,
          h("button", { type: "submit", class: "primary", id: "approve-edited" }, "Approve with these arguments")));
      actions.append(h("div", {}, C.button("Approve and execute", () => approve(a, etag), { class: "primary", id: "approve-approval" }),
        h("p", { class: "muted" }, "Sends If-Match: " + etag)), edit, form);
    } else if (a.status === "pending") actions.append(h("p", { class: "muted" }, "A reviewer key can approve or reject this."));
    const changes = a.result && a.result.changes;
    C.page(C.actionWords(a),
      h("p", {}, h("a", { href: "#/approvals" }, "← all approvals")),
      C.facts([["status", C.badge(a.status)], ["time left", timeLeft(a)], ["expires", C.fmtTime(a.expires_at)],
        ["agent's reason", a.rationale === undefined ? h("span", { class: "muted" }, "not recorded by this server") : a.rationale],
        ["tool", h("code", {}, a.action.tool)], a.edited ? ["edited", "approved with edited arguments"] : null,
        ["decision", a.decision ? `${a.decision.by} at ${C.fmtTime(a.decision.at)}` : null],
        a.decision_reason ? ["decision reason", a.decision_reason] : null,
        ["run", a.run_id ? h("a", { href: "#/runs/" + encodeURIComponent(a.run_id) }, C.short(a.run_id)) : null],
        ["suggestion", a.suggestion_id ? h("a", { href: "#/suggestions" }, C.short(a.suggestion_id)) : null]]),
      actions,
      a.status === "stale" ? changesTable(changes) : null,
      h("h2", {}, "Arguments"), h("pre", { id: "approval-args" }, C.json(a.action.args)),
      h("h2", {}, "Snapshot (what the agent saw)"), h("pre", { id: "approval-snapshot" }, C.json(a.snapshot)),
      a.result ? [h("h2", {}, "Result"), h("pre", { id: "approval-result" }, C.json(a.result))] : null,
      a.history && a.history.length ? [h("h2", {}, "History"), h("pre", {}, C.json(a.history))] : null);
  }

  C.pages.approvals = (id) => (id ? one(id) : list());
})();
