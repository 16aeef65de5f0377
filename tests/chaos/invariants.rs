//! The invariants the suite checks after its faults, in SQL against its database. Each is a
//! query naming every violating row (empty: it holds) and one counting what it examined.

use sqlx::PgPool;
use std::collections::HashSet;

/// One invariant's outcome.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub what: &'static str,
    /// Rows examined.
    pub checked: i64,
    pub violations: usize,
    /// The first violating rows, described.
    pub examples: Vec<String>,
}

struct Invariant {
    name: &'static str,
    what: &'static str,
    checked: &'static str,
    violating: &'static str,
}

const INVARIANTS: &[Invariant] = &[
    Invariant {
        name: "jobs_terminal_or_scheduled",
        what: "every job succeeded, dead, cancelled or waiting; none left running",
        checked: "SELECT count(*) FROM agentd_jobs",
        violating: "SELECT 'job ' || id || ' ' || kind || ' ' || state || ' attempt ' || attempt
                      FROM agentd_jobs WHERE state = 'running' ORDER BY id",
    },
    Invariant {
        name: "documents_settled",
        what: "no document queued or running for auto-create without a waiting or running job",
        checked: "SELECT count(*) FROM documents",
        violating: "SELECT 'document ' || d.id || ' ' || d.auto_create_status FROM documents d
                     WHERE d.auto_create_status IN ('queued', 'running')
                       AND NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.kind = 'auto_create'
                                          AND j.payload->>'document_id' = d.id::text
                                          AND j.state IN ('available', 'running'))",
    },
    Invariant {
        name: "upload_once",
        what: "each upload (idempotency key = name) stored once, whatever the retries",
        checked: "SELECT count(*) FROM documents",
        violating: "SELECT 'document name ' || name || ' stored ' || count(*) || ' times'
                      FROM documents GROUP BY org_id, name HAVING count(*) > 1",
    },
    Invariant {
        name: "tool_call_audited_once",
        what: "each tool call of a run has exactly one audit row (and a result only with one)",
        checked: "SELECT count(*) FROM agent_steps WHERE kind = 'tool_result'",
        violating: "SELECT 'run ' || run_id || ' call ' || call_id || ' audited ' || count(*) || ' times'
                      FROM audit_events WHERE run_id IS NOT NULL AND call_id IS NOT NULL
                     GROUP BY run_id, call_id HAVING count(*) > 1
                    UNION ALL
                    SELECT 'run ' || s.run_id || ' call ' || s.call_id || ' has a result and no audit row'
                      FROM agent_steps s WHERE s.kind = 'tool_result' AND NOT EXISTS
                           (SELECT 1 FROM audit_events a WHERE a.run_id = s.run_id AND a.call_id = s.call_id)",
    },
    Invariant {
        name: "effects_match_audit",
        what: "schemas, prompts, extractions and suggestions a run made = its executed audit rows of that tool",
        checked: "SELECT (SELECT count(*) FROM schemas) + (SELECT count(*) FROM prompts)
                       + (SELECT count(*) FROM extractions) + (SELECT count(*) FROM suggestions)",
        violating: "WITH effects AS (
                        -- create_schema makes a new schema, or reuses the org's (issue 28):
                        -- as it is (recorded on the run) or as a new version of the run's
                        -- (versions past 1 that no update_schema of the run made).
                        SELECT run_id, 'create_schema' AS tool, sum(n)::bigint AS n FROM (
                            SELECT run_id, count(DISTINCT schema_id) AS n FROM schemas
                             WHERE run_id IS NOT NULL AND version = 1 GROUP BY run_id
                            UNION ALL
                            SELECT id, 1 FROM agent_runs WHERE reused_schema_id IS NOT NULL
                            UNION ALL
                            SELECT s.run_id, count(*) - (SELECT count(*) FROM audit_events a
                                     WHERE a.run_id = s.run_id AND a.tool = 'update_schema'
                                       AND NOT a.is_error AND a.decision = 'auto_approved')
                              FROM schemas s WHERE s.run_id IS NOT NULL AND s.version > 1
                             GROUP BY s.run_id) made GROUP BY run_id
                        UNION ALL
                        SELECT run_id, 'create_prompt', count(DISTINCT prompt_id) FROM prompts
                         WHERE run_id IS NOT NULL AND version = 1 GROUP BY run_id
                        UNION ALL
                        SELECT run_id, 'run_extraction', count(*) FROM extractions
                         WHERE run_id IS NOT NULL GROUP BY run_id
                        UNION ALL
                        SELECT run_id, 'create_suggestion', count(*) FROM suggestions
                         WHERE run_id IS NOT NULL GROUP BY run_id),
                    audited AS (
                        SELECT run_id, tool, count(*) AS n FROM audit_events
                         WHERE run_id IS NOT NULL AND NOT is_error AND decision = 'auto_approved'
                           AND tool IN ('create_schema', 'create_prompt', 'run_extraction', 'create_suggestion')
                           -- a suggestion the night already has is found, not written again
                           AND NOT (tool = 'create_suggestion' AND outcome->>'duplicate' = 'true')
                         GROUP BY run_id, tool)
                    SELECT 'run ' || COALESCE(e.run_id, a.run_id) || ' ' || COALESCE(e.tool, a.tool)
                           || ': ' || COALESCE(e.n, 0) || ' effects, ' || COALESCE(a.n, 0) || ' audit rows'
                      FROM effects e FULL JOIN audited a ON a.run_id = e.run_id AND a.tool = e.tool
                     WHERE COALESCE(e.n, 0) <> COALESCE(a.n, 0)",
    },
    Invariant {
        name: "approval_decided_once",
        what: "each swept approval has one audit row; none is still pending past its expiry",
        checked: "SELECT count(*) FROM pending_approvals",
        violating: "SELECT call_id || ' audited ' || count(*) || ' times' FROM audit_events
                     WHERE call_id LIKE 'approval:%' GROUP BY call_id HAVING count(*) > 1
                    UNION ALL
                    SELECT 'approval ' || p.id || ' ' || p.status || ' without its audit row'
                      FROM pending_approvals p
                     WHERE p.status IN ('expired', 'stale') AND NOT EXISTS
                           (SELECT 1 FROM audit_events a WHERE a.call_id = 'approval:' || p.id)",
    },
    Invariant {
        name: "answer_charged_once",
        what: "each run's tokens = the usage of its checkpointed answers (more only when marked estimated)",
        checked: "SELECT count(*) FROM agent_steps WHERE kind IN ('llm_response', 'tool_model')",
        violating: "WITH s AS (
                        SELECT run_id,
                               sum(COALESCE((payload->'response'->'usage'->>'input_tokens')::bigint, 0)
                                 + COALESCE((payload->'response'->'usage'->>'output_tokens')::bigint, 0)) AS t
                          FROM agent_steps WHERE kind IN ('llm_response', 'tool_model') GROUP BY run_id)
                    SELECT 'run ' || r.id || ' charged ' || (r.input_tokens + r.output_tokens)
                           || ', its answers used ' || COALESCE(s.t, 0)
                           || CASE WHEN r.tokens_estimated THEN ' (estimated)' ELSE '' END
                      FROM agent_runs r LEFT JOIN s ON s.run_id = r.id
                     WHERE (NOT r.tokens_estimated AND r.input_tokens + r.output_tokens <> COALESCE(s.t, 0))
                        OR (r.tokens_estimated AND r.input_tokens + r.output_tokens < COALESCE(s.t, 0))",
    },
    Invariant {
        name: "no_run_left_running",
        what: "no run `running` unless its job still waits or runs",
        checked: "SELECT count(*) FROM agent_runs",
        violating: "SELECT 'run ' || r.id || ' ' || r.kind || ' running, job ' || COALESCE(j.state, 'gone')
                      FROM agent_runs r LEFT JOIN agentd_jobs j ON j.id = r.job_id
                     WHERE r.status = 'running' AND COALESCE(j.state, 'gone') NOT IN ('available', 'running')",
    },
    Invariant {
        name: "budget_equals_charges",
        what: "each org's budget use = the sum of its runs' tokens",
        checked: "SELECT count(*) FROM org_budgets",
        violating: "SELECT 'org ' || b.org_id || ' budget used ' || b.tokens_used || ', runs charged '
                           || COALESCE(r.t, 0)
                      FROM org_budgets b
                      LEFT JOIN (SELECT org_id, sum(input_tokens + output_tokens) AS t FROM agent_runs
                                  GROUP BY org_id) r ON r.org_id = b.org_id
                     WHERE b.tokens_used <> COALESCE(r.t, 0)",
    },
    Invariant {
        name: "event_written_once",
        what: "one event per transition (proposal, failed run, suggestion, approval made and ended), one delivery job per (event, subscription)",
        checked: "SELECT count(*) FROM agentd_events",
        violating: "SELECT type || ' of ' || subject_id || ' written ' || count(*) || ' times' FROM agentd_events
                     WHERE type IN ('proposal.ready', 'run.failed', 'suggestion.created', 'approval.created')
                     GROUP BY type, subject_id HAVING count(*) > 1
                    UNION ALL
                    SELECT 'approval ' || subject_id || ' ended ' || count(*) || ' times' FROM agentd_events
                     WHERE type IN ('approval.decided', 'approval.expired', 'approval.stale')
                     GROUP BY subject_id HAVING count(*) > 1
                    UNION ALL
                    SELECT 'event ' || (payload->>'event_id') || ' has ' || count(*) || ' delivery jobs'
                      FROM agentd_jobs WHERE kind = 'webhook_delivery'
                     GROUP BY payload->>'event_id', payload->>'webhook_id' HAVING count(*) > 1",
    },
];

/// Runs every invariant; `received` are the event ids the webhook receiver got (a delivery job
/// that succeeded names an event the receiver must have seen).
pub async fn check(pool: &PgPool, received: &HashSet<String>) -> anyhow::Result<Vec<Check>> {
    let mut out = Vec::new();
    for inv in INVARIANTS {
        let checked: i64 = sqlx::query_scalar(inv.checked).fetch_one(pool).await?;
        let rows: Vec<Option<String>> = sqlx::query_scalar(inv.violating)
            .fetch_all(pool)
            .await
            .map_err(|e| anyhow::anyhow!("invariant {}: {e}", inv.name))?;
        out.push(Check {
            name: inv.name,
            what: inv.what,
            checked,
            violations: rows.len(),
            examples: rows
                .into_iter()
                .take(5)
                .map(Option::unwrap_or_default)
                .collect(),
        });
    }
    // Deliveries: a succeeded delivery job was received (at least once: a receiver may see an
    // event twice when an acknowledgement is lost, which webhooks allow).
    let delivered: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, payload->>'event_id' FROM agentd_jobs
          WHERE kind = 'webhook_delivery' AND state = 'succeeded'",
    )
    .fetch_all(pool)
    .await?;
    let lost: Vec<String> = delivered
        .iter()
        .filter(|(_, ev)| !received.contains(ev))
        .map(|(id, ev)| format!("delivery job {id}: event {ev} never reached the receiver"))
        .collect();
    out.push(Check {
        name: "delivery_received",
        what: "every delivery marked succeeded reached the receiver",
        checked: delivered.len() as i64,
        violations: lost.len(),
        examples: lost.into_iter().take(5).collect(),
    });
    Ok(out)
}
