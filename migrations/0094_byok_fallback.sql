-- Review D2 (2026-12-02): an org that brought its own provider key (`org_provider_keys`,
-- migration 0072) had its calls fall back, when its own entry failed, to the other entries with
-- the operator's keys (the operator paid; the org's text reached a provider it never chose).
-- Its calls now go only to the entry its key is for, unless the org opts in here:
-- 'none' (the default): no fallback past its own key; 'operator': the operator's entries
-- (with the operator's keys) serve its calls when its own fails or does not serve the model.
ALTER TABLE orgs
    ADD COLUMN byok_fallback text NOT NULL DEFAULT 'none'
        CONSTRAINT orgs_byok_fallback_check CHECK (byok_fallback IN ('none', 'operator'));
