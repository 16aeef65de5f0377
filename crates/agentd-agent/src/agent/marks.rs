//! The loop's own checkpoints: a nudge (with its audit row) when the model answered in prose
//! before the goal was met, and the cap that ends a run, recorded before its forced summary so
//! a resumed run makes the same request; and each resume, so the deadline counts active time.

use super::{Engine, RunError, RunSpec, StopReason};
use crate::store::agent_loop;
use crate::store::runs::{self, AuditDecision, StepKind, StepRow};
use serde_json::json;
use uuid::Uuid;

impl Engine {
    /// Checkpoints a nudge (a user message naming what is missing) with its audit row.
    pub(super) async fn nudge(
        &self,
        spec: &RunSpec,
        run_id: Uuid,
        seq: i32,
        text: &str,
        missing: &[&str],
    ) -> Result<StepRow, RunError> {
        let now = self.clock.now();
        let mut tx = self.pool.begin().await?;
        let payload = json!({"text": text, "missing": missing});
        let row =
            agent_loop::insert_mark(&mut tx, run_id, seq, StepKind::Nudge, &payload, now).await?;
        let actor = format!("agent:{}", spec.kind);
        runs::insert_audit(
            &mut *tx,
            &runs::NewAudit {
                outcome: Some(&payload),
                ..runs::NewAudit::new(
                    spec.org_id,
                    Some(run_id),
                    &actor,
                    "nudge",
                    runs::AuditCategory::Loop,
                    AuditDecision::Nudged,
                    now,
                )
            },
        )
        .await?;
        tx.commit().await?;
        metrics::counter!("agentd_agent_nudges_total", "kind" => spec.kind.clone()).increment(1);
        Ok(row)
    }

    /// Marks a resumed run (the time since its last checkpoint does not count as active).
    pub(super) async fn record_resume(&self, run_id: Uuid, seq: i32) -> Result<StepRow, RunError> {
        let mut conn = self.pool.acquire().await?;
        let now = self.clock.now();
        Ok(
            agent_loop::insert_mark(&mut conn, run_id, seq, StepKind::Resume, &json!({}), now)
                .await?,
        )
    }

    /// Checkpoints the cap that ends the run (the forced summary follows).
    pub(super) async fn record_cap(
        &self,
        run_id: Uuid,
        seq: i32,
        reason: StopReason,
    ) -> Result<StepRow, RunError> {
        let mut conn = self.pool.acquire().await?;
        let payload = json!({"reason": reason.as_str()});
        let now = self.clock.now();
        Ok(agent_loop::insert_mark(&mut conn, run_id, seq, StepKind::Cap, &payload, now).await?)
    }
}

/// The run's active time: from its start to now, less the gaps between the last checkpoint
/// before each `resume` mark and that mark (time queued, released or waiting for a retry).
pub fn active_time(
    started_at: chrono::DateTime<chrono::Utc>,
    steps: &[crate::store::runs::StepRow],
    now: chrono::DateTime<chrono::Utc>,
) -> chrono::Duration {
    let mut idle = chrono::Duration::zero();
    let mut last = started_at;
    for s in steps {
        if s.step_kind() == Some(StepKind::Resume) {
            idle += (s.created_at - last).max(chrono::Duration::zero());
        }
        last = last.max(s.created_at);
    }
    (now - started_at - idle).max(chrono::Duration::zero())
}
