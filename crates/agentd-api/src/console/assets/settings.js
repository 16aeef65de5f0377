// Settings page (admin): the org's token budget, model, time zone and approval TTL. Only the
// values changed are sent (PATCH); an empty field is null (unlimited, the default model, the
// job file's TTL). The server refuses what this key may not set (e.g. lifting a budget) and
// says why.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  // [key, label, type, what empty means]
  const FIELDS = [
    ["monthly_token_budget", "Monthly token budget", "number", "unlimited"],
    ["model", "Model", "text", "the server's default"],
    ["timezone", "Time zone (IANA, e.g. Europe/Berlin)", "text", null],
    ["approval_ttl_secs", "Approval TTL in seconds (60 – 2592000)", "number", "the job file's"],
  ];

  C.pages.settings = async function settings() {
    const [r, u] = await Promise.all([C.api("GET", "/v1/settings"), C.api("GET", "/v1/usage")]);
    if (!r.ok) return C.page("Settings", h("p", { class: "error-text" }, C.problem(r)));
    const s = r.body;
    const usage = u.ok ? u.body : null;
    const inputs = {};
    const rows = FIELDS.map(([k, label, type, empty]) => {
      const v = s[k];
      inputs[k] = h("input", { id: "setting-" + k, name: k, type, value: v === null || v === undefined ? "" : String(v),
        min: type === "number" ? 0 : null });
      return h("p", {}, h("label", { for: "setting-" + k }, label), inputs[k],
        empty ? h("span", { class: "muted" }, ` (empty: ${empty})`) : null);
    });
    const form = h("form", { class: "stack", id: "settings-form", onsubmit: async (e) => {
      e.preventDefault();
      const patch = {};
      for (const [k, , type] of FIELDS) {
        const raw = inputs[k].value.trim();
        const v = raw === "" ? null : type === "number" ? Number(raw) : raw;
        if (type === "number" && v !== null && !Number.isInteger(v)) {
          C.flash(`${k} must be a whole number.`, "error");
          return inputs[k].focus();
        }
        if (v !== s[k]) patch[k] = v;
      }
      if (!Object.keys(patch).length) return C.flash("Nothing changed.", "ok");
      const res = await C.api("PATCH", "/v1/settings", { body: patch });
      if (!res.ok) return C.flash("Not saved: " + C.problem(res), "error");
      await C.route();
      C.flash("Settings saved: " + Object.keys(patch).join(", ") + ".", "ok");
    } }, rows, h("button", { type: "submit", class: "primary", id: "save-settings" }, "Save"));
    C.page("Settings",
      C.facts([["tokens used this month", String(s.tokens_used_this_month)],
        usage ? ["runs this month", `${usage.runs} runs, ${usage.tokens} tokens, ` +
          C.fmtUsd(usage.cost_usd) + (usage.cost_note ? ` (${usage.cost_note})` : " at the price table")] : null,
        ["enforced token limit", s.effective_token_limit === null ? "unlimited" : String(s.effective_token_limit)],
        ["nightly hour", String(s.nightly_hour)]]),
      form);
  };
})();
