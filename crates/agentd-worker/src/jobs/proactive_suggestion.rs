//! `proactive_suggestion`: nightly, one job per org. The agent reads the org's state and writes
//! suggestions; every other write or destructive action becomes a pending approval (policy in
//! `jobs/proactive_suggestion.toml`).

use super::render;
use crate::app::App;
use crate::kinds::{JobKind, ProactiveSuggestion};
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::orgs;
use chrono::NaiveDate;
use tracing::info;
use uuid::Uuid;

pub use crate::kinds::proactive_suggestion::Payload;

/// The handler.
pub struct Proactive {
    pub app: App,
}

#[async_trait::async_trait]
impl JobHandler for Proactive {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p = ProactiveSuggestion::parse(&job.job.payload)?;
        let app = &self.app;
        let org = orgs::find(&app.pool, &p.org_id.to_string()).await?;
        let org = JobError::when_gone(org, || format!("org {} does not exist", p.org_id))?;
        if !org.active {
            info!(org_id = %p.org_id, "org is inactive; no suggestions");
            return Ok(());
        }
        let spec = app.spec(ProactiveSuggestion::NAME);
        // A run that waited for its decisions is resumed by a job of its own (`agent/wait.rs`):
        // the night's signals were read when it started, whatever the decisions changed since.
        let resumes = spec.agent.await_decisions
            && crate::store::runs::run_for_job(&app.pool, job.job.id)
                .await?
                .is_some();
        if spec.agent.only_with_signals && !resumes {
            // The same overview `org_overview` gives the model (one row per list is enough to
            // know whether it is empty): an org with nothing to do costs no model call.
            let mut conn = app.pool.acquire().await?;
            let o = crate::store::suggestions::overview(
                &mut conn,
                p.org_id,
                app.clock.now(),
                p.night,
                crate::tools::suggestions::WAITING_AFTER_DAYS,
                1,
            )
            .await?;
            drop(conn);
            let room = spec
                .agent
                .max_suggestions
                .is_none_or(|cap| o.suggestions_this_night < i64::from(cap));
            if !(o.has_signals() && room) {
                metrics::counter!("agentd_nightly_skipped_total").increment(1);
                info!(org_id = %p.org_id, night = %p.night, signals = o.has_signals(),
                      "nothing to do tonight: no model run");
                return Ok(());
            }
        }
        let first = render(&spec.agent.first_message, &[("night", p.night.to_string())]);
        let mut run_spec =
            app.run_spec(spec, p.org_id, p.night.to_string(), Some(job.job.id), first);
        run_spec.night = Some(p.night);
        // What people decided lately in the org (rejections with their reasons, dismissals).
        run_spec.decisions = Some(crate::store::decisions::DecisionScope::Org);
        // Waits for the decisions on its proposals, then is resumed with the night's payload.
        run_spec.resume_job = spec
            .agent
            .await_decisions
            .then(|| ProactiveSuggestion::queued(&p, &spec.queue));
        let o = super::run_loop(app, spec, &run_spec, &job).await?;
        info!(run_id = %o.run_id, status = %o.status, "nightly review done");
        Ok(())
    }
}

/// The nightly job of `org` for `night` (its key: [`ProactiveSuggestion::unique`]).
pub fn nightly_job(
    q: &crate::catalog::QueuePolicy,
    org: Uuid,
    night: NaiveDate,
) -> crate::queue::NewJob {
    ProactiveSuggestion::queued(&Payload { org_id: org, night }, q)
}

/// The org's night at `now`: its local date (`orgs.timezone`), as the cron fan-out reckons it;
/// `None` if the org does not exist.
pub async fn night_of(
    pool: &sqlx::PgPool,
    org: Uuid,
    now: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<Option<NaiveDate>> {
    let settings = crate::store::org_settings::get(pool, org).await?;
    Ok(settings.map(|s| now.with_timezone(&crate::org_settings::tz(&s)).date_naive()))
}
