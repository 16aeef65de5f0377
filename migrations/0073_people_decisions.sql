-- Issue 33, item 3: a proposal that repeats an action a person rejected is refused. The check
-- (`store::decisions::rejected_same`) looks up the org's approvals of the same tool and the
-- same arguments; this index finds them without reading the org's other approvals. It names
-- no column a decision writes (`status`, `decided_*`, `result`, `decision_reason`), so a
-- decision stays a HOT update (migration 0062); `args` changes only when a person approves
-- edited arguments.
CREATE INDEX pending_approvals_action_idx
    ON pending_approvals (org_id, tool, md5(args::text));

-- Issue 33, item 1: a reviewer asking for a refine is audited as `requested` (who asked, the
-- instructions' length and hash). `NOT VALID`: every existing row already holds one of the older
-- values, and checking them would read the whole trail under a lock.
ALTER TABLE audit_events DROP CONSTRAINT audit_events_decision_check;
ALTER TABLE audit_events ADD CONSTRAINT audit_events_decision_check
    CHECK (decision IN ('auto_approved', 'proposed', 'denied', 'human_approved', 'human_rejected',
                        'expired', 'stale', 'error', 'capped', 'nudged', 'repeated', 'edited',
                        'requested')) NOT VALID;
