// Webhooks page (admin): the org's subscriptions with their state (failing since, deliveries
// failed in a row, paused until), delete; add one — the console makes the signing secret in
// this browser and shows it once, after the server stored it.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  // 32 random bytes as hex: the signing secret (the server keeps it, never shows it again).
  const newSecret = () => Array.from(crypto.getRandomValues(new Uint8Array(32)), (b) => b.toString(16).padStart(2, "0")).join("");

  function state(w) {
    if (!w.failing_since) return w.consecutive_failures ? `${w.consecutive_failures} failed in a row` : "healthy";
    return `failing since ${C.fmtTime(w.failing_since)} (${w.consecutive_failures} failed in a row)` +
      (w.open_until ? `, deliveries wait until ${C.fmtTime(w.open_until)}` : "");
  }

  async function remove(w) {
    const r = await C.api("DELETE", "/v1/webhooks/" + encodeURIComponent(w.id));
    if (!r.ok) return C.flash("Could not delete: " + C.problem(r), "error");
    await C.route();
    C.flash(`Deleted the webhook to ${w.url}.`, "ok");
  }

  C.pages.webhooks = async function webhooks() {
    const r = await C.api("GET", "/v1/webhooks");
    if (!r.ok) return C.page("Webhooks", h("p", { class: "error-text" }, C.problem(r)));
    const list = C.table("Webhooks", ["URL", "events", "state", "created", "action"],
      r.body.webhooks.map((w) => [h("code", {}, w.url), w.events.join(", "),
        h("span", { class: w.failing_since ? "error-text" : null, "data-webhook-state": w.id }, state(w)),
        C.fmtTime(w.created_at),
        C.button("Delete", () => remove(w), { class: "danger", "data-delete-webhook": w.id, "aria-label": "Delete the webhook to " + w.url })]),
      "No webhooks.");
    const url = h("input", { id: "webhook-url", name: "url", type: "url", required: true, maxlength: 2048 });
    const events = h("input", { id: "webhook-events", name: "events", required: true, value: "proposal.ready, approval.created" });
    const shown = h("div", { id: "webhook-secret", "aria-live": "polite" });
    const form = h("form", { class: "stack", id: "webhook-form", onsubmit: async (e) => {
      e.preventDefault();
      const secret = newSecret();
      const body = { url: url.value.trim(), events: events.value.split(",").map((x) => x.trim()).filter(Boolean), secret };
      const res = await C.api("POST", "/v1/webhooks", { body });
      if (!res.ok) return C.flash("Not added: " + C.problem(res), "error");
      await C.route();
      C.flash(`Added the webhook to ${res.body.url}.`, "ok");
      document.getElementById("webhook-secret").replaceChildren(...C.nodes(
        h("p", {}, "Its signing secret, shown this once (the receiver checks Agentd-Signature with it):"),
        h("pre", { id: "webhook-secret-value" }, secret)));
    } }, h("label", { for: "webhook-url" }, "URL (https, a public address)"), url,
      h("label", { for: "webhook-events" }, "Event types, comma-separated"), events,
      h("button", { type: "submit", class: "primary", id: "add-webhook" }, "Add webhook"));
    C.page("Webhooks", list, h("h2", {}, "Add a webhook"), form, shown);
  };
})();
