// Keys page (admin): the org's API keys (prefix, role, created, revoked), revoke; make a key —
// shown once, right after the server made it.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const ROLES = ["reader", "uploader", "reviewer", "admin"];

  async function revoke(k) {
    const r = await C.api("POST", `/v1/keys/${encodeURIComponent(k.id)}/revoke`);
    if (!r.ok) return C.flash("Could not revoke: " + C.problem(r), "error");
    await C.route();
    C.flash(`Revoked key ${k.key_prefix}….`, "ok");
  }

  C.pages.keys = async function keys() {
    const r = await C.api("GET", "/v1/keys");
    if (!r.ok) return C.page("Keys", h("p", { class: "error-text" }, C.problem(r)));
    const list = C.table("Keys", ["key", "role", "created", "revoked", "action"],
      r.body.keys.map((k) => [h("code", {}, k.key_prefix + "…"), k.role + (C.me && k.id === C.me.key_id ? " (this key)" : ""),
        C.fmtTime(k.created_at), k.revoked_at ? C.fmtTime(k.revoked_at) : "—",
        k.revoked_at || (C.me && k.id === C.me.key_id) ? "" : C.button("Revoke", () => revoke(k), { class: "danger", "data-revoke-key": k.id, "aria-label": "Revoke key " + k.key_prefix })]),
      "No keys.");
    const role = h("select", { id: "key-role", name: "role" }, ROLES.map((x) => h("option", { value: x }, x)));
    const form = h("form", { class: "inline", id: "key-form", onsubmit: async (e) => {
      e.preventDefault();
      const res = await C.api("POST", "/v1/keys", { body: { role: role.value } });
      if (!res.ok) return C.flash("No key made: " + C.problem(res), "error");
      await C.route();
      C.flash(`Made a ${res.body.role} key.`, "ok");
      document.getElementById("new-key").replaceChildren(...C.nodes(
        h("p", {}, "The new key, shown this once: copy it now."), h("pre", { id: "new-key-value" }, res.body.key)));
    } }, h("label", { for: "key-role" }, "Role"), role, h("button", { type: "submit", class: "primary", id: "create-key" }, "Make a key"));
    C.page("Keys", list, h("h2", {}, "Make a key"), form, h("div", { id: "new-key", "aria-live": "polite" }));
  };
})();
