//! `agentd keys create|list|revoke`: API keys. Only a SHA-256 of a key is stored; `create`
//! shows the key once.

use super::bad;
use super::output::changed_or;
use super::output::print_list;
use crate::api::{Role, create_key};
use crate::app::App;
use crate::store::{api_keys, orgs};
use clap::Subcommand;
use serde_json::json;
use uuid::Uuid;

/// Key commands.
#[derive(Subcommand, Debug)]
pub enum KeysCmd {
    /// Create a key for an org; the key is printed once.
    Create {
        /// Org id or name.
        #[arg(long)]
        org: String,
        /// reader, uploader, reviewer or admin.
        #[arg(long)]
        role: String,
        #[arg(long)]
        json: bool,
    },
    /// Keys (never the secret: id, org, role, prefix, times).
    List {
        /// Only this org (id or name).
        #[arg(long)]
        org: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: requests with it get 401 from now on.
    Revoke { id: Uuid },
}

/// Runs a key command.
pub async fn run(app: &App, cmd: KeysCmd) -> anyhow::Result<()> {
    match cmd {
        KeysCmd::Create {
            org,
            role,
            json: as_json,
        } => {
            let role = Role::parse(&role).ok_or_else(|| {
                bad(format!(
                    "--role must be one of reader, uploader, reviewer, admin (got {role:?})"
                ))
            })?;
            let org = orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("--org: no org with id or name {org:?}")))?;
            let (id, key) = create_key(&app.pool, org.id, role, app.clock.now()).await?;
            if as_json {
                println!(
                    "{}",
                    json!({"id": id, "org_id": org.id, "role": role.as_str(), "key": key})
                );
            } else {
                println!(
                    "key {id} ({}) for org {} — shown only now:",
                    role.as_str(),
                    org.name
                );
                println!("{key}");
            }
        }
        KeysCmd::List { org, json: as_json } => {
            let org_id = super::output::org_id(app, org.as_deref()).await?;
            let rows = api_keys::list_keys(&app.pool, org_id).await?;
            print_list(&rows, as_json, Some("(no keys)"), None, |k| {
                format!(
                    "{}  {:<8} {:<20} {}…  created {}{}",
                    k.id,
                    k.role,
                    k.org_name,
                    k.key_prefix,
                    k.created_at.format("%Y-%m-%d %H:%M:%S"),
                    k.revoked_at
                        .map(|t| format!("  REVOKED {}", t.format("%Y-%m-%d %H:%M:%S")))
                        .unwrap_or_default()
                )
            })?;
        }
        KeysCmd::Revoke { id } => changed_or(
            api_keys::revoke_key(&app.pool, id, None, app.clock.now()).await?,
            format!("key {id} revoked"),
            format!(
                "no live key with id {id} (unknown or already revoked; see `agentd keys list`)"
            ),
        )?,
    }
    Ok(())
}
