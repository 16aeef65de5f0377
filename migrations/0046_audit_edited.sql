-- Approving with edited arguments writes an `edited` audit row (issue 15).
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check
    CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved', 'human_rejected',
                        'expired', 'stale', 'error', 'capped', 'nudged', 'repeated', 'edited'));
