//! `agentd documents add|list|show|accept|reject|refine`.

use super::bad;
use super::output::{print_json, print_list};
use super::report::{document_report, print_report};
use crate::app::App;
use crate::documents::add_document;
use crate::kinds::{self, JobKind};
use crate::store::{auto_create, documents, orgs};
use clap::Subcommand;
use serde_json::{Value, json};
use std::path::PathBuf;
use uuid::Uuid;

/// Document commands.
#[derive(Subcommand, Debug)]
pub enum DocumentsCmd {
    /// Insert a document (and, with --auto-create, enqueue its auto-create in the same transaction).
    Add {
        /// Org id or name (a new name creates the org).
        #[arg(long)]
        org: String,
        #[arg(long)]
        name: String,
        /// The document's text (UTF-8; invalid bytes are replaced, NUL bytes dropped).
        #[arg(long)]
        text_file: PathBuf,
        #[arg(long)]
        auto_create: bool,
        #[arg(long)]
        json: bool,
    },
    /// Documents of an org, newest first.
    List {
        #[arg(long)]
        org: String,
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[arg(long)]
        json: bool,
    },
    /// A document's auto-create status and proposal (schema fields, prompt, extracted values).
    Show {
        id: Uuid,
        #[arg(long)]
        json: bool,
        /// Instead: what agentd keeps about the document (text, extractions, transcripts,
        /// audit rows, redaction tokens).
        #[arg(long)]
        retention: bool,
    },
    /// Accept the proposal: schema and prompt become active, the extraction accepted.
    Accept {
        id: Uuid,
        /// Who decides (recorded as `cli:<who>` on the audit row and the event).
        #[arg(long, default_value = "operator")]
        by: String,
    },
    /// Reject the proposal: its artifacts are removed (the audit trail stays).
    Reject {
        id: Uuid,
        /// Who decides (recorded as `cli:<who>` on the audit row and the event).
        #[arg(long, default_value = "operator")]
        by: String,
    },
    /// Refine the proposal with instructions: a run starts from it and writes new versions of
    /// its schema and prompt and a new extraction; the document is `proposed` again after it.
    Refine {
        id: Uuid,
        /// What to change, in your words (1–2000 characters).
        #[arg(long)]
        instructions: String,
        /// Who asks (recorded as `human:cli:<who>` on the audit row).
        #[arg(long, value_name = "WHO", default_value = "operator")]
        by: String,
        #[arg(long)]
        json: bool,
    },
}

/// Runs a documents command.
pub async fn run(app: &App, cmd: DocumentsCmd) -> anyhow::Result<()> {
    match cmd {
        DocumentsCmd::Add {
            org,
            name,
            text_file,
            auto_create: auto,
            json: as_json,
        } => {
            let bytes = std::fs::read(&text_file).map_err(|e| {
                bad(format!(
                    "--text-file {}: cannot read: {e}",
                    text_file.display()
                ))
            })?;
            let text = documents::text_from_bytes(&bytes);
            if name.trim().is_empty() {
                return Err(bad("--name must not be empty"));
            }
            let org = match orgs::find(&app.pool, &org).await? {
                Some(o) => o,
                None if Uuid::parse_str(&org).is_ok() => {
                    return Err(bad(format!("--org: no org with id {org}")));
                }
                None => orgs::ensure(&app.pool, &org).await?,
            };
            let (id, job) = add_document(app, org.id, &name, &text, auto).await?;
            if as_json {
                println!(
                    "{}",
                    json!({"document_id": id, "org_id": org.id, "job_id": job})
                );
            } else {
                println!("document {id} added to org {} ({})", org.name, org.id);
                if let Some(j) = job {
                    println!("auto_create job {j} enqueued; run `agentd worker` to process it");
                }
            }
        }
        DocumentsCmd::List {
            org,
            limit,
            json: as_json,
        } => {
            let org = orgs::find(&app.pool, &org)
                .await?
                .ok_or_else(|| bad(format!("--org: no org {org:?}")))?;
            let rows = doc_rows(app, org.id, limit).await?;
            print_list(&rows, as_json, None, None, |r| {
                let field = |k: &str| r[k].as_str().unwrap_or("").to_string();
                let (id, status) = (field("id"), field("auto_create_status"));
                format!("{id}  {status:<10} {}", field("name"))
            })?;
        }
        DocumentsCmd::Show {
            id,
            json: as_json,
            retention: true,
        } => {
            let mut conn = app.pool.acquire().await?;
            let org = auto_create::state(&mut *conn, None, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?
                .org_id;
            let k = crate::pii::retention::kept_for_document(&mut conn, org, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            if as_json {
                print_json(&k)?;
            } else {
                println!("document {id}: what agentd keeps");
                println!("  text                {} characters", k.text_chars);
                println!("  extractions         {}", k.extractions);
                println!(
                    "  runs                {} ({} transcript steps, {} compacted: text removed)",
                    k.runs, k.transcript_steps, k.compacted_steps
                );
                println!(
                    "  audit rows          {} (redacted arguments, result summaries and SHA-256; append-only)",
                    k.audit_rows
                );
                println!("  redaction tokens    {}", k.pii_tokens);
                println!(
                    "  approvals           {}, suggestions {}, refine instructions {}",
                    k.approvals, k.suggestions, k.refine_requests
                );
                println!(
                    "Deleting the document removes its text, extractions, transcript text and tokens; audit rows keep their hashes."
                );
            }
        }
        DocumentsCmd::Show {
            id, json: as_json, ..
        } => {
            let report = document_report(app, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            if as_json {
                print_json(&report)?;
            } else {
                print_report(&report);
            }
        }
        DocumentsCmd::Refine {
            id,
            instructions,
            by,
            json: as_json,
        } => {
            use crate::jobs::refine::{RefineError, request};
            let org = auto_create::state(&app.pool, None, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?
                .org_id;
            let by = match by.trim() {
                "" => return Err(bad("--by must name who asks, e.g. --by alice")),
                who => format!("cli:{who}"),
            };
            let q = &app.spec(kinds::AutoCreate::NAME).queue;
            let now = app.clock.now();
            let queued = match request(&app.pool, q, org, id, &instructions, &by, now).await {
                Ok(q) => q,
                Err(RefineError::Instructions(m)) => {
                    return Err(bad(format!("--instructions: {m}")));
                }
                Err(RefineError::Db(e)) => return Err(e.into()),
                Err(RefineError::Queue(e)) => return Err(e.into()),
                Err(e) => return Err(bad(e.to_string())),
            };
            if as_json {
                print_json(&queued)?;
            } else {
                println!(
                    "document {id}: refine enqueued (auto_create job {}); run `agentd worker` to process it",
                    queued.job_id
                );
            }
        }
        DocumentsCmd::Accept { id, ref by } | DocumentsCmd::Reject { id, ref by } => {
            let accept = matches!(cmd, DocumentsCmd::Accept { .. });
            let by = match by.trim() {
                "" => return Err(bad("--by must name who decides, e.g. --by alice")),
                who => format!("cli:{who}"),
            };
            let mut tx = app.pool.begin().await?;
            let st = auto_create::state(&mut *tx, None, id)
                .await?
                .ok_or_else(|| bad(format!("no document with id {id}")))?;
            let st = auto_create::lock_state(&mut tx, st.org_id, id)
                .await?
                .ok_or_else(|| bad(format!("document {id} was deleted meanwhile")))?;
            if st.auto_create_status != documents::AutoCreateStatus::Proposed {
                return Err(bad(format!(
                    "document {id} has no proposal to decide (auto_create_status = {})",
                    st.auto_create_status
                )));
            }
            let run = st
                .auto_create_run_id
                .ok_or_else(|| bad(format!("document {id} is proposed without a run")))?;
            use crate::api::acts::{Act, record_by};
            let act = if accept {
                Act::AcceptProposal
            } else {
                Act::RejectProposal
            };
            let about = serde_json::json!({"document_id": id, "run_id": run});
            let now = app.clock.now();
            record_by(&mut tx, st.org_id, &by, act, Some(id), about, now).await?;
            if accept {
                auto_create::accept(&mut tx, st.org_id, id, run, app.clock.now()).await?;
                tx.commit().await?;
                println!(
                    "document {id}: proposal accepted (schema and prompt active, extraction accepted)"
                );
            } else {
                let n = auto_create::reject(&mut tx, st.org_id, id, run, app.clock.now()).await?;
                tx.commit().await?;
                println!(
                    "document {id}: proposal rejected ({n} proposed artifact(s) removed; audit kept)"
                );
            }
        }
    }
    Ok(())
}

async fn doc_rows(app: &App, org_id: Uuid, limit: i64) -> anyhow::Result<Vec<Value>> {
    let mut conn = app.pool.acquire().await?;
    let filter = documents::DocumentFilter {
        name_search: None,
        tag_ids: None,
        status: None,
        limit: limit.clamp(1, 100),
    };
    let rows = documents::list(&mut conn, org_id, &filter).await?;
    Ok(rows
        .into_iter()
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .collect())
}
