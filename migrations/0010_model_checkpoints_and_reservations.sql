-- A tool's own model answer (run_extraction) is checkpointed before it is applied, so a crash
-- after the call reuses it instead of calling the model again.
ALTER TABLE agent_steps DROP CONSTRAINT agent_steps_kind_check;
ALTER TABLE agent_steps ADD CONSTRAINT agent_steps_kind_check
    CHECK (kind IN ('llm_response', 'tool_result', 'tool_model'));

-- Tokens reserved for provider calls in flight: a call is made only when the org's used tokens
-- plus every unexpired reservation plus its own estimate fit the monthly limit; the reservation
-- is replaced by the real usage when the answer is checkpointed. A crashed caller's reservation
-- stops counting at expires_at.
CREATE TABLE budget_reservations (
    id         uuid PRIMARY KEY,
    org_id     uuid   NOT NULL REFERENCES orgs(id) ON DELETE CASCADE,
    tokens     bigint NOT NULL CHECK (tokens >= 0),
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX budget_reservations_org_idx ON budget_reservations (org_id, expires_at);
