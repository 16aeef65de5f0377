//! The fixture of the safety tests: one org with the run's document, a neighbour, the org's
//! active schema and prompt (made by a person) and an extraction of the neighbour.
#![allow(dead_code)]

use crate::common::{self, TestDb};
use agentd::app::App;
use agentd::clock::{ManualClock, SharedClock};
use agentd::llm::scripted::ScriptedProvider;
use agentd::store::extractions::ExtractionSource;
use agentd::store::prompts::PromptFields;
use chrono::Utc;
use serde_json::{Value, json};
use std::sync::Arc;
use uuid::Uuid;

pub struct Org {
    pub db: TestDb,
    pub clock: Arc<ManualClock>,
    pub org: Uuid,
    /// The run's document.
    pub doc: Uuid,
    /// A neighbour in the same org.
    pub other: Uuid,
    /// The org's active schema and prompt (made by a person).
    pub schema: Uuid,
    pub prompt: Uuid,
    /// An extraction of `other`.
    pub extraction: Uuid,
}

pub fn format() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "s", "strict": true, "schema": {
        "type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
        "additionalProperties": false}}})
}

/// The schema's response_format under another name (a real change: a new version).
pub fn renamed(name: &str) -> Value {
    let mut f = format();
    f["json_schema"]["name"] = json!(name);
    f
}

pub async fn org() -> Org {
    let db = TestDb::new().await;
    let clock = ManualClock::new(Utc::now());
    let org = agentd::store::orgs::ensure(&db.pool, "acme")
        .await
        .unwrap()
        .id;
    let mut c = db.pool.acquire().await.unwrap();
    let now = Utc::now();
    let doc = agentd::store::documents::insert(
        &mut c,
        org,
        "mine.txt",
        Some("Total: 1"),
        &json!({}),
        now,
    )
    .await
    .unwrap();
    let other = agentd::store::documents::insert(
        &mut c,
        org,
        "other.txt",
        Some("Total: 2"),
        &json!({"k": "v"}),
        now,
    )
    .await
    .unwrap();
    let s = agentd::store::schemas::create(&mut c, org, "Active", &format(), None, now)
        .await
        .unwrap();
    sqlx::query("UPDATE schemas SET status = 'active'")
        .execute(&mut *c)
        .await
        .unwrap();
    let f = PromptFields {
        name: "Active".into(),
        content: "Extract a.".into(),
        schema_id: s.schema_id,
        schema_version: s.version,
        model: None,
        tag_ids: vec![],
    };
    let p = agentd::store::prompts::create(&mut c, org, &f, None, now)
        .await
        .unwrap();
    let src = ExtractionSource {
        document_id: other,
        prompt_id: p.prompt_id,
        prompt_version: p.version,
        schema_id: s.schema_id,
        schema_version: s.version,
    };
    let e =
        agentd::store::extractions::insert(&mut c, org, src, &json!({"a": "orig"}), &[], None, now)
            .await
            .unwrap();
    Org {
        db,
        clock,
        org,
        doc,
        other,
        schema: s.schema_id,
        prompt: p.prompt_id,
        extraction: e.id,
    }
}

pub fn app(o: &Org, p: Arc<ScriptedProvider>) -> App {
    let mut app = common::app(&o.db, o.clock.clone() as SharedClock);
    app.provider = p;
    app
}

pub async fn scalar<T>(o: &Org, sql: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&o.db.pool)
        .await
        .unwrap()
}

/// The hostile script: writes on the neighbour and the org's artifacts, then reads the neighbour.
pub fn last_result(req: &agentd::llm::CompletionRequest) -> Value {
    req.messages
        .iter()
        .rev()
        .flat_map(|m| m.content.iter())
        .find_map(|b| match b {
            agentd::llm::Block::ToolResult { content, .. } => serde_json::from_str(content).ok(),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

pub fn call(
    name: &str,
    args: Value,
) -> Result<agentd::llm::CompletionResponse, agentd::llm::LlmError> {
    Ok(agentd::llm::CompletionResponse {
        message: agentd::llm::Message {
            role: agentd::llm::Role::Assistant,
            content: vec![agentd::llm::Block::ToolUse {
                id: "x".into(),
                name: name.into(),
                arguments: args.to_string(),
            }],
        },
        usage: agentd::llm::Usage {
            input_tokens: 100,
            output_tokens: 20,
            ..Default::default()
        },
        finish: agentd::llm::FinishReason::ToolUse,
        model: "scripted".into(),
    })
}
