//! `agentd orgs create NAME [--json]`: a new org and its first API key (role admin), shown once.
//! `agentd orgs delete NAME --yes`: the org and everything it owns (personal data included);
//! the audit trail keeps its summaries and hashes.

use super::bad;
use crate::api::{Role, create_key};
use crate::app::App;
use crate::store::api_keys;
use clap::Subcommand;
use serde_json::json;

/// Org commands.
#[derive(Subcommand, Debug)]
pub enum OrgsCmd {
    /// Create an org; prints its id and its first API key (admin). The key is shown only now.
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    /// Delete an org (id or name) and all its data: documents, extractions, transcripts,
    /// redaction tokens, approvals, suggestions, keys. Audit rows stay (no document text).
    Delete {
        org: String,
        /// Required: there is no undo.
        #[arg(long)]
        yes: bool,
        #[arg(long)]
        json: bool,
    },
}

/// Runs an org command.
pub async fn run(app: &App, cmd: OrgsCmd) -> anyhow::Result<()> {
    match cmd {
        OrgsCmd::Delete {
            org,
            yes,
            json: as_json,
        } => {
            if !yes {
                return Err(bad(
                    "deleting an org cannot be undone: add --yes to delete it and all its data",
                ));
            }
            let row = crate::store::orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            let mut tx = app.pool.begin().await?;
            let r = crate::pii::retention::delete_org(&mut tx, row.id, app.clock.now())
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            tx.commit().await?;
            if as_json {
                println!("{}", json!({"org_id": row.id, "deleted": r}));
            } else {
                println!(
                    "org {} deleted: {} document(s), {} run(s) with their transcripts; {} waiting job(s) cancelled; audit rows kept (summaries and hashes)",
                    row.name, r.documents, r.runs, r.jobs_cancelled
                );
            }
            Ok(())
        }
        OrgsCmd::Create {
            name,
            json: as_json,
        } => {
            let name = name.trim().to_string();
            if name.is_empty() || name.contains('\0') {
                return Err(bad("NAME must be a non-empty org name"));
            }
            let mut tx = app.pool.begin().await?;
            let org_id = api_keys::create_org(&mut *tx, &name).await?.ok_or_else(|| {
                bad(format!(
                    "an org named {name:?} exists already; make it a key with `agentd keys create --org {name} --role admin`"
                ))
            })?;
            let (key_id, key) = create_key(&mut *tx, org_id, Role::Admin, app.clock.now()).await?;
            tx.commit().await?;
            if as_json {
                println!(
                    "{}",
                    json!({"org_id": org_id, "key": key, "key_id": key_id, "role": "admin"})
                );
            } else {
                println!("org {name} created: {org_id}");
                println!("API key (admin, id {key_id}) — shown only now, store it safely:");
                println!("{key}");
            }
            Ok(())
        }
    }
}
