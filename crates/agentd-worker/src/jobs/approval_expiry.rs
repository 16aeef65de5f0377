//! `approval_expiry`: the sweep (`{}`, a cron `{tick}`, or an org's `{org_id, approval_ids}`),
//! or a capped re-proposal run for one stale approval (`{org_id, repropose}`), through the same
//! tool loop. A job that names an org touches that org's approvals only.

use super::render;
use crate::app::App;
use crate::approvals::Sweeper;
use crate::kinds::{self, JobKind};
use crate::queue::JobError;
use crate::queue::worker::{JobContext, JobHandler};
use crate::store::approvals::{self, ApprovalStatus};
use tracing::info;

pub use crate::kinds::approval_expiry::Payload;

/// The handler.
pub struct ApprovalExpiry {
    pub app: App,
}

impl ApprovalExpiry {
    /// The sweeper with the job file's settings.
    pub fn sweeper(app: &App) -> Sweeper {
        let spec = app.spec(kinds::ApprovalExpiry::NAME);
        let sweep = spec.sweep.clone().unwrap_or(crate::catalog::SweepSpec {
            batch: 5000,
            workers: 2,
            retention_days: 30,
            max_reproposals: 2,
            expiring_notice_secs: 3600,
        });
        Sweeper {
            pool: app.pool.clone(),
            clock: app.clock.clone(),
            env: app.tool_env(spec),
            batch: sweep.batch,
            workers: sweep.workers,
            retention: chrono::Duration::days(i64::from(sweep.retention_days)),
            max_reproposals: sweep.max_reproposals,
            expiring_notice: chrono::Duration::seconds(
                sweep.expiring_notice_secs.min(i64::MAX as u64 / 1000) as i64,
            ),
            repropose_priority: spec.queue.priority,
            repropose_max_attempts: spec.queue.max_attempts,
            progress: None,
            row_by_row: false,
        }
    }
}

#[async_trait::async_trait]
impl JobHandler for ApprovalExpiry {
    async fn handle(&self, job: JobContext) -> Result<(), JobError> {
        let p = kinds::ApprovalExpiry::parse(&job.job.payload)?;
        let app = &self.app;
        if let Some(org) = p.org_id {
            // A job of one org acts on that org's approvals only: the API checked the ids when
            // it made the job, and this holds for any producer of the payload.
            let named: Vec<_> = [p.repropose, p.repropose_expired]
                .into_iter()
                .flatten()
                .chain(p.approval_ids.iter().flatten().copied())
                .collect();
            let others =
                crate::store::api_reads::approvals_of_other_orgs(&app.pool, org, &named).await?;
            if let Some(other) = others.first() {
                return Err(JobError::fatal(format_args!(
                    "approval {other} is another org's than the job's ({org}): nothing done"
                )));
            }
        }
        if let Some(id) = p.repropose_expired {
            let spec = app.spec(kinds::ApprovalExpiry::NAME);
            let ttl = chrono::Duration::seconds(spec.agent.approval_ttl_secs as i64);
            let env = app.tool_env(app.spec(kinds::ProactiveSuggestion::NAME));
            let out = crate::approvals::expiring::repropose_expired(
                &app.pool,
                &env,
                id,
                ttl,
                app.clock.now(),
            )
            .await
            .map_err(|e| match e {
                crate::tools::ToolError::Db(e) => e.into(),
                other => JobError::fatal(other),
            })?;
            info!(approval_id = %id, outcome = ?out, "expired approval re-proposal");
            return Ok(());
        }
        let Some(stale_id) = p.repropose else {
            let report = Self::sweeper(app)
                .run_once(p.approval_ids.as_deref())
                .await?;
            info!(?report, "approval sweep done");
            return Ok(());
        };
        let a = approvals::get(&app.pool, stale_id).await?;
        let a = JobError::when_gone(a, || {
            format!("approval {stale_id} does not exist (purged?)")
        })?;
        if a.status != ApprovalStatus::Stale {
            return Err(JobError::fatal(format_args!(
                "approval {stale_id} is {}, not stale: nothing to re-propose",
                a.status
            )));
        }
        // An offboarded org's stale approval is not re-proposed: that is a model run (review #25).
        let org_active = crate::store::orgs::find(&app.pool, &a.org_id.to_string())
            .await?
            .is_some_and(|o| o.active);
        if !org_active {
            info!(approval_id = %a.id, "stale approval of an inactive org: not re-proposed");
            return Ok(());
        }
        let spec = app.spec(kinds::ApprovalExpiry::NAME);
        let changes = a
            .result
            .as_ref()
            .map(|r| r["changes"].to_string())
            .unwrap_or_default();
        let first = render(
            &spec.agent.first_message,
            &[
                ("approval_id", a.id.to_string()),
                ("tool", a.action.tool.clone()),
                ("args", a.action.args.to_string()),
                ("changes", changes),
            ],
        );
        let mut run_spec = app.run_spec(
            spec,
            a.org_id,
            format!("approval:{}", a.id),
            Some(job.job.id),
            first,
        );
        run_spec.chain = Some(a.chain.next());
        // What people decided about the same document (else the same chain).
        use crate::store::decisions::DecisionScope;
        let about = app
            .registry
            .get(&a.action.tool)
            .and_then(|t| t.document(&a.action.args));
        run_spec.decisions = Some(match about {
            Some(doc) => DecisionScope::Document(doc),
            None => DecisionScope::Chain(a.chain.id),
        });
        // Its goal: the action proposed again while its document exists.
        run_spec.repropose = Some(crate::agent::goals::Reproposal {
            tool: a.action.tool.clone(),
            document_id: about,
        });
        let o = super::run_loop(app, spec, &run_spec, &job).await?;
        info!(run_id = %o.run_id, status = %o.status, "re-proposal run done");
        Ok(())
    }
}
