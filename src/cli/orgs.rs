//! `agentd orgs create NAME [--json]`: a new org and its first API key (role admin), shown once.
//! `agentd orgs delete NAME --yes`: the org and everything it owns (personal data included);
//! the audit trail keeps its summaries and hashes.
//! `agentd orgs set-limit ORG --kind K --max-running N|--clear`: an org's own cap of running
//! jobs of a kind across the fleet (`queue::fair`).
//! `agentd orgs set-key ORG [--provider NAME] < key` / `--delete`: the org's own provider key
//! (`llm::org_keys`).
//! `agentd orgs set ORG key=value …` / `agentd orgs show ORG`: per-org settings (see
//! `crate::org_settings`; a bad key or value is exit 2 naming it).
//! `agentd orgs rekey [--json]`: every org's provider key and every webhook secret sealed again
//! under the current `llm.org_key_encryption_key` (`llm::org_keys::rekey`, review D9).

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
    /// Change an org's settings: key=value … (monthly_token_budget, cost_cap_cents, model,
    /// auto_create, timezone, nightly_hour, approval_ttl_secs, repropose_expired, byok_fallback,
    /// requests_per_minute, runs_per_minute; `null` clears).
    Set {
        org: String,
        #[arg(required = true)]
        settings: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Cap the jobs of one kind this org may have running at once across the fleet (its own
    /// cap; without one, the job file's `queue.max_running_per_org` applies).
    SetLimit {
        org: String,
        /// The job kind (a job file's `kind`).
        #[arg(long)]
        kind: String,
        /// At most this many running at once (≥ 1).
        #[arg(long, required_unless_present = "clear", conflicts_with = "clear")]
        max_running: Option<u32>,
        /// Remove the org's own cap (the kind's applies again).
        #[arg(long)]
        clear: bool,
        #[arg(long)]
        json: bool,
    },
    /// An org's settings.
    Show {
        org: String,
        #[arg(long)]
        json: bool,
    },
    /// Store the org's own provider key, read from standard input (one line; never an
    /// argument, which `ps` and shell history would show): encrypted with
    /// llm.org_key_encryption_key, replacing the key before. `--delete` removes it.
    SetKey {
        org: String,
        /// The provider entry it is for (`llm.providers[].name`); default: the first entry
        /// that takes a key.
        #[arg(long)]
        provider: Option<String>,
        /// Remove the org's key instead: its calls use the operator's keys again.
        #[arg(long)]
        delete: bool,
    },
    /// Seal every org's provider key and every webhook secret again under
    /// llm.org_key_encryption_key: rows of llm.org_key_previous_encryption_keys, from before key
    /// ids, and webhook secrets stored in clear. All rows or none (a row no listed key opens
    /// changes nothing and is named: exit 2). Afterwards the previous keys can be removed.
    Rekey {
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
        OrgsCmd::Set {
            org,
            settings,
            json: as_json,
        } => {
            let row = crate::store::orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            let patch =
                crate::org_settings::parse_pairs(&settings).map_err(|e| bad(e.to_string()))?;
            match crate::org_settings::apply(
                &app.pool,
                &app.config,
                row.id,
                &patch,
                app.clock.now(),
                crate::org_settings::SetBy::Operator,
            )
            .await
            {
                Ok(_) => show(app, row.id, &row.name, as_json).await,
                Err(crate::org_settings::ApplyError::Invalid(e)) => Err(bad(e.to_string())),
                Err(e) => Err(e.into()),
            }
        }
        OrgsCmd::SetLimit {
            org,
            kind,
            max_running,
            clear: _,
            json: as_json,
        } => {
            let row = crate::store::orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            if !app.catalog.kinds.contains_key(&kind) {
                let known: Vec<&str> = app.catalog.kinds.keys().map(String::as_str).collect();
                return Err(bad(format!(
                    "--kind: no job kind {kind:?} (known: {})",
                    known.join(", ")
                )));
            }
            if max_running == Some(0) {
                return Err(bad(
                    "--max-running must be at least 1 (pause the kind to stop its claims)",
                ));
            }
            crate::queue::fair::set_org_limit(&app.pool, &kind, row.id, max_running).await?;
            show(app, row.id, &row.name, as_json).await
        }
        OrgsCmd::SetKey {
            org,
            provider,
            delete,
        } => {
            let row = crate::store::orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            if delete {
                let had = crate::store::org_keys::delete(&app.pool, row.id).await?;
                println!(
                    "org {}: {}",
                    row.name,
                    if had {
                        "provider key removed"
                    } else {
                        "no provider key was set"
                    }
                );
                return Ok(());
            }
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| bad(format!("cannot read the key from standard input: {e}")))?;
            let now = app.clock.now();
            let set = crate::llm::org_keys::set_key(
                &app.pool,
                &app.config.llm,
                row.id,
                &line,
                provider.as_deref(),
                now,
            )
            .await;
            match set {
                Ok(()) => {}
                Err(crate::llm::org_keys::SetKeyError::Db(e)) => return Err(e.into()),
                Err(e) => return Err(bad(e)),
            }
            let k = crate::store::org_keys::get(&app.pool, row.id).await?;
            let last4 = k.map(|k| k.last4).unwrap_or_default();
            println!(
                "org {}: provider key stored (encrypted; ends in {last4})",
                row.name
            );
            Ok(())
        }
        OrgsCmd::Rekey { json: as_json } => {
            let cipher =
                crate::llm::org_keys::Cipher::from_config(&app.config.llm).ok_or_else(|| {
                    bad(
                        "llm.org_key_encryption_key is not set: set it to the new master key \
                         (AGENTD_LLM__ORG_KEY_ENCRYPTION_KEY) and list the old one in \
                         llm.org_key_previous_encryption_keys",
                    )
                })?;
            let done = match crate::llm::org_keys::rekey(&app.pool, &cipher).await {
                Ok(done) => done,
                Err(crate::llm::org_keys::RekeyError::Db(e)) => return Err(e.into()),
                Err(e) => {
                    return Err(bad(format!(
                        "{e}. Nothing was re-keyed: list the key it was stored with in \
                         llm.org_key_previous_encryption_keys, or remove that org key \
                         (`agentd orgs set-key ORG --delete`) or webhook"
                    )));
                }
            };
            if as_json {
                println!("{}", serde_json::to_value(&done)?);
            } else {
                println!(
                    "re-keyed under master key {}: {} org provider key(s), {} webhook secret(s); \
                     every stored secret is now under it",
                    done.key_id, done.org_keys, done.webhook_secrets
                );
            }
            Ok(())
        }
        OrgsCmd::Show { org, json: as_json } => {
            let row = crate::store::orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("no org {org:?}")))?;
            show(app, row.id, &row.name, as_json).await
        }
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

async fn show(app: &App, org_id: uuid::Uuid, name: &str, as_json: bool) -> anyhow::Result<()> {
    let s = crate::store::org_settings::get(&app.pool, org_id)
        .await?
        .ok_or_else(|| bad(format!("no org {org_id}")))?;
    let b = crate::store::runs::budget(&app.pool, org_id, app.clock.now()).await?;
    let limit = b.map(|b| b.monthly_limit);
    let caps = crate::queue::fair::org_limits(&app.pool, org_id).await?;
    if as_json {
        let mut v = serde_json::to_value(&s)?;
        v["max_running"] = caps.iter().map(|(k, n)| (k.clone(), json!(n))).collect();
        v["effective_token_limit"] = json!(limit);
        v["monthly_token_budget"] = json!(s.token_budget);
        println!("{v}");
        return Ok(());
    }
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!("org {name} ({org_id})");
    println!("  timezone            {}", s.timezone);
    println!("  nightly_hour        {}", s.nightly_hour);
    println!(
        "  approval_ttl_secs   {}",
        opt(s.approval_ttl_secs.map(|n| n.to_string()))
    );
    println!("  repropose_expired   {}", s.repropose_expired);
    println!("  byok_fallback       {}", s.byok_fallback);
    println!(
        "  requests_per_minute {}",
        opt(s.requests_per_minute.map(|n| n.to_string()))
    );
    println!(
        "  runs_per_minute     {}",
        opt(s.runs_per_minute.map(|n| n.to_string()))
    );
    println!("  model               {}", opt(s.model.clone()));
    println!("  auto_create         {}", s.auto_create);
    println!(
        "  monthly_token_budget {}",
        opt(s.token_budget.map(|n| n.to_string()))
    );
    println!(
        "  cost_cap_cents      {}",
        opt(s.cost_cap_cents.map(|n| n.to_string()))
    );
    println!(
        "  enforced limit      {}",
        opt(limit.map(|n| n.to_string()))
    );
    for (kind, n) in &caps {
        println!("  max_running {kind:<16} {n}");
    }
    Ok(())
}
