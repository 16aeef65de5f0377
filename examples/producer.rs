//! docs/queue.md's "Producing jobs from another service": the producer inserts its document and
//! enqueues the `auto_create` job in its own transaction, so a rollback leaves no job. Built by
//! `cargo test --all-targets`, so the example in the docs cannot stop compiling.
//!
//! Run against a migrated database with an org (`agentd orgs create acme`):
//! `DATABASE_URL=postgres://… cargo run --example producer -- <org_id> ["document text"]`,
//! then `agentd worker` processes the job.

use agentd::queue::{self, NewJob};
use anyhow::Context;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

/// The producer's own write (here: the document row agentd reads).
async fn insert_document(conn: &mut PgConnection, org_id: Uuid, text: &str) -> sqlx::Result<Uuid> {
    let id = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO documents (id, org_id, name, text, auto_create_status)
         VALUES ($1, $2, $3, $4, 'queued')",
    )
    .bind(id)
    .bind(org_id)
    .bind(text.lines().next().unwrap_or("document"))
    .bind(text)
    .execute(conn)
    .await?;
    Ok(id)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").context("set DATABASE_URL")?;
    let mut args = std::env::args().skip(1);
    let org_id: Uuid = args
        .next()
        .context("usage: producer ORG_ID [TEXT]")?
        .parse()
        .context("ORG_ID must be a UUID")?;
    let text = args
        .next()
        .unwrap_or_else(|| "Invoice 2024-001\nACME GmbH\ntotal 12.50 EUR".into());
    let pool = sqlx::PgPool::connect(&url).await?;

    let mut tx = pool.begin().await?;
    let doc_id = insert_document(&mut tx, org_id, &text).await?;
    let job_id = queue::enqueue(
        &mut *tx,
        &NewJob::new(
            "auto_create",
            json!({"org_id": org_id, "document_id": doc_id}),
        )
        .unique_key(format!("auto_create:{doc_id}")),
    )
    .await?;
    tx.commit().await?;

    match job_id {
        Some(id) => println!("document {doc_id}: auto_create job {id} enqueued"),
        None => println!("document {doc_id}: an auto_create job with that key is already waiting"),
    }
    Ok(())
}
