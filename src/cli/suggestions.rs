//! `agentd suggestions list|dismiss|shown`: the nightly job's suggestions and their life
//! (`pending → shown → acted | dismissed | expired`).

use super::bad;
use super::output::{ListOpts, print_list};
use crate::app::App;
use crate::store::api_reads::{self, SuggestionItem};
use crate::store::suggestions::{self as store, SuggestionStatus, Transition};
use clap::Subcommand;
use serde_json::json;
use uuid::Uuid;

/// Suggestion commands.
#[derive(Subcommand, Debug)]
pub enum SuggestionsCmd {
    /// An org's suggestions, newest first (states: pending, shown, acted, dismissed, expired).
    List {
        #[arg(long)]
        org: String,
        #[command(flatten)]
        opts: ListOpts,
    },
    /// Dismiss a suggestion; the nightly run skips the same kind for the same subject for 14 days.
    Dismiss {
        id: Uuid,
        #[arg(long)]
        org: String,
        /// Why (1–500 characters).
        #[arg(long)]
        reason: String,
    },
    /// Mark a suggestion shown to a person.
    Shown {
        id: Uuid,
        #[arg(long)]
        org: String,
    },
}

/// Runs a suggestions command.
pub async fn run(app: &App, cmd: SuggestionsCmd) -> anyhow::Result<()> {
    match cmd {
        SuggestionsCmd::List { org, opts } => {
            let (status, limit) = opts.checked::<SuggestionStatus>()?;
            let o = org_of(app, org).await?;
            let rows: Vec<SuggestionItem> =
                api_reads::page(&app.pool, o.id, status, None, None, limit).await?;
            print_list(&rows, opts.json, Some("(no suggestions)"), None, |item| {
                let r = &item.row;
                let reason = r.status_reason.as_ref().map(|x| format!("  [{x}]"));
                let reason = reason.unwrap_or_default();
                format!(
                    "{}  {:<9} {:<16} {}{reason}",
                    r.id, item.state, r.fields.kind, r.fields.title
                )
            })
        }
        SuggestionsCmd::Dismiss { id, org, reason } => {
            let reason = reason.trim().to_string();
            if reason.is_empty() || reason.chars().count() > 500 {
                return Err(bad("--reason must say why (1–500 characters)"));
            }
            let o = org_of(app, org).await?;
            change(app, o.id, id, SuggestionStatus::Dismissed, Some(&reason)).await
        }
        SuggestionsCmd::Shown { id, org } => {
            let o = org_of(app, org).await?;
            change(app, o.id, id, SuggestionStatus::Shown, None).await
        }
    }
}

async fn change(
    app: &App,
    org_id: Uuid,
    id: Uuid,
    to: SuggestionStatus,
    reason: Option<&str>,
) -> anyhow::Result<()> {
    let mut tx = app.pool.begin().await?;
    let out = store::transition(&mut tx, org_id, id, to, reason, "cli", app.clock.now()).await?;
    tx.commit().await?;
    match out {
        Transition::Done(state) => {
            println!("{}", json!({"id": id, "state": state}));
            Ok(())
        }
        Transition::Refused(state) => Err(bad(format!(
            "suggestion {id} is {state}; it cannot become {to}"
        ))),
        Transition::NotFound => Err(bad(format!("no suggestion {id} in this org"))),
    }
}

async fn org_of(app: &App, org: String) -> anyhow::Result<crate::store::orgs::OrgRow> {
    crate::store::orgs::find(&app.pool, &org)
        .await?
        .ok_or_else(|| bad(format!("--org: no org {org:?}")))
}
