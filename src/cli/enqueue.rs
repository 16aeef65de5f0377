//! `agentd enqueue`: one job of a built-in kind, checked like the producer API checks it.

use super::bad;
use crate::app::App;
use crate::kinds::{self, JobKind};
use crate::queue::{self, NewJob};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum EnqueueCmd {
    /// Propose schema, prompt and extraction for a document.
    AutoCreate {
        #[arg(long)]
        org: String,
        #[arg(long)]
        document: String,
        /// Run again even if the document already has a proposal.
        #[arg(long)]
        force: bool,
    },
    /// Nightly suggestions for one org (unique per org and night).
    Proactive {
        #[arg(long)]
        org: String,
        /// The night, YYYY-MM-DD (default: the org's local date).
        #[arg(long)]
        night: Option<chrono::NaiveDate>,
    },
    /// Expire and re-validate pending approvals now.
    ApprovalExpiry {
        /// Only these approvals (default: all pending).
        #[arg(long, value_delimiter = ',')]
        approval_ids: Vec<uuid::Uuid>,
    },
    /// Any kind with a raw JSON payload (for producers and tests).
    Raw {
        #[arg(long)]
        kind: String,
        #[arg(long)]
        payload: String,
        #[arg(long)]
        unique_key: Option<String>,
        /// RFC 3339 time; default now.
        #[arg(long)]
        run_at: Option<chrono::DateTime<chrono::Utc>>,
        #[arg(long, default_value_t = 0)]
        priority: i16,
        #[arg(long)]
        max_attempts: Option<i32>,
    },
}

pub(super) async fn run(app: &App, e: EnqueueCmd) -> anyhow::Result<()> {
    let spec = |kind: &str| app.catalog.get(kind).expect("builtin kind").queue.clone();
    let job = match e {
        EnqueueCmd::AutoCreate {
            org,
            document,
            force,
        } => {
            let q = spec(kinds::AutoCreate::NAME);
            let document_id = uuid::Uuid::parse_str(&document).map_err(|_| {
                bad(format!(
                    "--document must be a document id (UUID), got {document:?}"
                ))
            })?;
            let org_id = uuid::Uuid::parse_str(&org)
                .map_err(|_| bad(format!("--org must be an org id (UUID), got {org:?}")))?;
            let payload = kinds::auto_create::Payload {
                org_id,
                document_id,
                force,
                ..Default::default()
            };
            kinds::AutoCreate::queued(&payload, &q)
        }
        EnqueueCmd::Proactive { org, night } => {
            let q = spec(kinds::ProactiveSuggestion::NAME);
            let org_id = uuid::Uuid::parse_str(&org)
                .map_err(|_| bad(format!("--org must be an org id (UUID), got {org:?}")))?;
            let night = match night {
                Some(n) => n,
                None => {
                    crate::jobs::proactive_suggestion::night_of(&app.pool, org_id, app.clock.now())
                        .await?
                        .ok_or_else(|| bad(format!("--org: no org with id {org_id}")))?
                }
            };
            crate::jobs::proactive_suggestion::nightly_job(&q, org_id, night)
        }
        EnqueueCmd::ApprovalExpiry { approval_ids } => {
            let q = spec(kinds::ApprovalExpiry::NAME);
            let payload = kinds::approval_expiry::Payload {
                approval_ids: (!approval_ids.is_empty()).then_some(approval_ids),
                ..Default::default()
            };
            kinds::ApprovalExpiry::queued(&payload, &q)
        }
        EnqueueCmd::Raw {
            kind,
            payload,
            unique_key,
            run_at,
            priority,
            max_attempts,
        } => {
            if app.catalog.get(&kind).is_none() {
                return Err(bad(format!(
                    "--kind: unknown job kind `{kind}` (known: {}); no worker of this build would ever run it",
                    app.catalog
                        .kinds
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let payload: serde_json::Value = serde_json::from_str(&payload)
                .map_err(|e| bad(format!("--payload is not valid JSON: {e}")))?;
            let mut job = NewJob::new(kind, payload).priority(priority);
            job.unique_key = unique_key;
            job.run_at = run_at;
            if let Some(m) = max_attempts {
                job = job.max_attempts(m);
            }
            job
        }
    };
    match queue::enqueue_committed(&app.pool, &job).await {
        Ok(Some(id)) => println!("enqueued {} job {id}", job.kind),
        Ok(None) => println!(
            "skipped: a {} job with unique key {:?} already exists",
            job.kind,
            job.unique_key.unwrap_or_default()
        ),
        Err(queue::QueueError::Invalid(m)) => return Err(bad(m)),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
