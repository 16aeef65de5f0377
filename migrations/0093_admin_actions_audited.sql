-- Review D5: an admin's or reviewer's consequential act through the API — accepting or rejecting
-- a proposal, making or revoking a key, setting the org's provider key, adding or removing a
-- webhook, changing settings, pausing, resuming, cancelling or retrying jobs — appends an audit
-- row (category `admin`, or `document` for a proposal, decision `performed` for the admin acts)
-- and an event, in the transaction of the act. `NOT VALID` as in migration 0073.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check
    CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved', 'human_rejected',
                        'expired', 'stale', 'error', 'capped', 'nudged', 'repeated', 'edited',
                        'requested', 'performed')) NOT VALID;
