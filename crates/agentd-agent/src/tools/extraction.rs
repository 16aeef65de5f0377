//! Tools of the `extraction` group: `get_extraction_result`, `run_extraction` (one model call
//! with the prompt, the document excerpt and the schema as `response_format`; the answer is
//! validated against the schema before it is stored `proposed`) and `update_extraction_field`.

use super::documents::{document_id_or_default, existing_document};
use super::extraction_model::{apply_extraction, prepare_extraction};
use super::schemas::{inner_schema, validate_instance};
use super::summary::{Summary, quoted};
use super::typed::{Id, Refines, tool};
use super::{ModelCall, Target, ToolCtx, ToolError, TypedTool, revid, unfenced};
use crate::analysis::ground;
use crate::llm::CompletionResponse;
use crate::store::documents::{self as documents, clean_json};
use crate::store::extractions::{self as store, ExtractionRow, ExtractionStatus};
use crate::store::prompts::{self as prompts, PromptRow};
use crate::store::schemas;
use crate::store::{sql, versions};
use serde_json::{Value, json};

/// Output tokens allowed to the extraction call.
pub(crate) const EXTRACTION_MAX_TOKENS: u32 = 2000;

pub(crate) fn extraction_json(e: &ExtractionRow) -> Value {
    json!({
        "extraction_id": e.id,
        "document_id": e.document_id,
        "prompt_revid": revid(e.prompt_id, e.prompt_version),
        "schema_revid": revid(e.schema_id, e.schema_version),
        "status": e.status,
        "result": e.result,
        "ungrounded": e.ungrounded,
        "created_at": e.created_at,
    })
}

/// The model's answer as JSON: tolerates a ```json fence and prose around one object.
pub(crate) fn parse_json_answer(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str(unfenced(text)) {
        return Some(v);
    }
    let t = text.trim();
    let (start, end) = (t.find('{')?, t.rfind('}')?);
    (start < end)
        .then(|| serde_json::from_str(t.get(start..=end)?).ok())
        .flatten()
}

tool! {
    /// `get_extraction_result`.
    GetExtractionResult {
        /// Defaults to the document this run is about.
        document_id: Option<Id>,
    } = Read "get_extraction_result",
    "Get the latest extraction of a document {document_id?}: \
    extraction_id, result, status, prompt_revid and schema_revid (extraction is null if \
    there is none yet)."
}

impl TypedTool for GetExtractionResult {
    fn targets(&self) -> Vec<Target> {
        vec![Target::ReadDocument(Id::uuid(self.document_id))]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let doc = document_id_or_default(ctx, self.document_id)?;
        let doc = existing_document(ctx, doc).await?;
        let e = store::latest_for_document(ctx.conn, ctx.org_id, doc, false).await?;
        Ok(json!({"document_id": doc, "extraction": e.as_ref().map(extraction_json)}))
    }
}

tool! {
    /// `run_extraction`.
    RunExtraction {
        /// "<prompt_id>:<version>" from create_prompt.
        pub prompt_revid: Option<String>,
        /// Defaults to the document this run is about.
        pub document_id: Option<Id>,
    } = Write "run_extraction",
    "Run an extraction {prompt_revid?, document_id?}: the \
    prompt (default: the latest prompt this run created) is sent with the document text to \
    the extraction model, whose JSON answer must follow the prompt's schema. The result is \
    stored as proposed and returned with its extraction_id; a result that breaks the schema \
    is an error listing the problems (fix the prompt or the schema, then run again)."
}

/// The prompt `run_extraction` uses: `prompt_revid`, else the latest prompt of this run.
pub(crate) async fn prompt_for(
    ctx: &mut ToolCtx<'_>,
    prompt_revid: Option<&str>,
) -> Result<PromptRow, ToolError> {
    if let Some(s) = prompt_revid {
        return super::resolve(ctx, s, "prompt_revid").await;
    }
    let none = || {
        ToolError::Invalid(
            "no prompt_revid given and this run has not created a prompt: call create_prompt \
             first, or pass prompt_revid (see list_prompts)"
                .into(),
        )
    };
    let run = ctx.run_id.ok_or_else(none)?;
    prompts::latest_in_run(ctx.conn, ctx.org_id, run)
        .await?
        .ok_or_else(none)
}

impl TypedTool for RunExtraction {
    const PROPOSABLE: bool = true;
    const CALLS_MODEL: bool = true;
    /// A second extraction in a run redoes the first.
    const REFINES: Refines = Refines::Again;

    fn guided_parameters(_candidates: &[String]) -> Option<Value> {
        // The document defaults to the run's; the constraint pins the run's prompt.
        Some(super::typed::guided::<Self>(&["prompt_revid"]))
    }
    /// `Run the extraction on document 'a.txt'`.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(format!(
            "Run the extraction on {}",
            s.document().await?
        )))
    }

    fn targets(&self) -> Vec<Target> {
        vec![Target::Document(Id::uuid(self.document_id))]
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        // Direct use (tests, tools outside the loop): prepare, call, apply on one connection.
        // The loop and approvals use prepare/apply with no transaction open during the call.
        let call = prepare_extraction(ctx, &self).await?;
        let provider = ctx.provider.clone();
        let resp = provider
            .complete(call.request)
            .await
            .map_err(|e| ToolError::Provider(format!("the extraction model failed: {e}")))?;
        let mut out = apply_extraction(ctx, &call.state, &resp).await?;
        out["usage"] = json!({"input_tokens": resp.usage.input_tokens,
                              "output_tokens": resp.usage.output_tokens});
        Ok(out)
    }
    async fn prepare(&self, ctx: &mut ToolCtx<'_>) -> Result<ModelCall, ToolError> {
        prepare_extraction(ctx, self).await
    }
    async fn apply(
        &self,
        ctx: &mut ToolCtx<'_>,
        state: &Value,
        answer: &CompletionResponse,
    ) -> Result<Value, ToolError> {
        apply_extraction(ctx, state, answer).await
    }
    /// The document's text and the prompt's versions, locked: what the extraction depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let doc_id = document_id_or_default(ctx, self.document_id)?;
        // The document's snapshot (locked) cut to what an extraction depends on: whether it
        // exists and its text, not its name, tags or metadata.
        let mut document = documents::snapshot(ctx.conn, ctx.org_id, doc_id).await?;
        if let Value::Object(parts) = &mut document {
            parts.retain(|k, _| matches!(k.as_str(), "exists" | "document_id" | "text_sha256"));
        }
        let prompt = match prompt_for(ctx, self.prompt_revid.as_deref()).await {
            Ok(p) => {
                // Lock the prompt's versions so it cannot go away before the decision.
                versions::lock_all::<PromptRow>(ctx.conn, ctx.org_id, p.prompt_id).await?;
                json!({"exists": true, "prompt_revid": revid(p.prompt_id, p.version),
                       "schema_revid": revid(p.fields.schema_id, p.fields.schema_version)})
            }
            Err(ToolError::NotFound(_)) | Err(ToolError::Invalid(_)) => {
                json!({"exists": false, "prompt_revid": self.prompt_revid})
            }
            Err(e) => return Err(e),
        };
        Ok(json!({"document": document, "prompt": prompt}))
    }
}

/// Most segments a field path may have. The path is the model's: without a bound, 100k
/// segments built 100k nested objects, which dropping, hashing or serialising recursed through
/// until the stack overflowed and the process aborted (review S1). serde_json's own parser stops
/// at 128 levels; extraction schemas are far shallower.
pub const MAX_PATH_SEGMENTS: usize = 32;

/// A path as segments: a JSON pointer (`/lines/0/price`) or dotted (`lines.0.price`,
/// `lines[0].price`), at most [`MAX_PATH_SEGMENTS`] of them.
fn path_segments(path: &str) -> Result<Vec<String>, ToolError> {
    // Counted before anything is built from the path (a separator per segment, at most).
    if path.matches(['/', '.', '[']).count() > MAX_PATH_SEGMENTS {
        return Err(ToolError::Invalid(format!(
            "path has more than {MAX_PATH_SEGMENTS} segments; name a field of the extraction"
        )));
    }
    let bad = || {
        ToolError::Invalid(format!(
            "path must name a field, as a JSON pointer \"/total\" or dotted \"total\" / \
             \"lines.0.price\" (got {path:?})"
        ))
    };
    let segs: Vec<String> = if let Some(p) = path.strip_prefix('/') {
        p.split('/')
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect()
    } else {
        path.replace('[', ".")
            .replace(']', "")
            .split('.')
            .map(str::to_string)
            .collect()
    };
    if path.trim().is_empty() || segs.iter().any(String::is_empty) {
        return Err(bad());
    }
    if segs.len() > MAX_PATH_SEGMENTS {
        return Err(ToolError::Invalid(format!(
            "path has more than {MAX_PATH_SEGMENTS} segments; name a field of the extraction"
        )));
    }
    Ok(segs)
}

/// Why a value cannot be set at a path (after "cannot set <path>: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum PathError {
    #[error("empty path")]
    Empty,
    /// `at` is an array of `len` and `seg` is not an index in it.
    #[error("/{at} is an array of {len}: {seg:?} is not an index in it")]
    NotAnIndex { at: String, len: usize, seg: String },
    /// `at` holds `found`, which has no fields or items.
    #[error("/{at} is {found}, not an object or array: set it as a whole instead")]
    NotAContainer { at: String, found: String },
}

/// Sets `value` at `segs` inside `root`; missing object keys on the way are created.
fn set_path(root: &mut Value, segs: &[String], value: Value) -> Result<(), PathError> {
    let Some((last, parents)) = segs.split_last() else {
        return Err(PathError::Empty);
    };
    let mut cur = root;
    let mut walked = String::new();
    let not_an_index = |at: &str, len: usize, seg: &str| PathError::NotAnIndex {
        at: at.to_string(),
        len,
        seg: seg.to_string(),
    };
    let not_a_container = |at: &str, found: &Value| PathError::NotAContainer {
        at: at.to_string(),
        found: found.to_string(),
    };
    for seg in parents {
        cur = match cur {
            Value::Object(m) => m
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Default::default())),
            Value::Array(a) => {
                let len = a.len();
                seg.parse::<usize>()
                    .ok()
                    .and_then(|i| a.get_mut(i))
                    .ok_or_else(|| not_an_index(&walked, len, seg))?
            }
            other => return Err(not_a_container(&walked, other)),
        };
        walked = if walked.is_empty() {
            seg.clone()
        } else {
            format!("{walked}/{seg}")
        };
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => a[i] = value,
            Ok(i) if i == a.len() => a.push(value),
            _ if last == "-" => a.push(value),
            _ => return Err(not_an_index(&walked, a.len(), last)),
        },
        other => return Err(not_a_container(&walked, other)),
    }
    Ok(())
}

tool! {
    /// `update_extraction_field`.
    UpdateExtractionField {
        #[schemars(length(min = 1))]
        path: String,
        /// The new value (any JSON).
        value: Value,
        extraction_id: Option<Id>,
        document_id: Option<Id>,
    } = Write "update_extraction_field",
    "Correct one field of a proposed extraction {path, value, \
    extraction_id? | document_id?}: path is a JSON pointer (\"/total\", \"/lines/0/price\") \
    or dotted (\"total\", \"lines.0.price\"); the edited result must still match the \
    schema. Defaults to the latest extraction of the run's document."
}

impl UpdateExtractionField {
    /// The extraction to edit, locked: `extraction_id`, else the latest extraction of
    /// `document_id` (default: the run's document).
    async fn target(&self, ctx: &mut ToolCtx<'_>) -> Result<Option<ExtractionRow>, ToolError> {
        if let Some(Id(id)) = self.extraction_id {
            return Ok(sql::by_id(ctx.conn, ctx.org_id, id, true).await?);
        }
        let doc = document_id_or_default(ctx, self.document_id)?;
        Ok(store::latest_for_document(ctx.conn, ctx.org_id, doc, true).await?)
    }

    fn not_found(&self) -> ToolError {
        let what = match (self.extraction_id, self.document_id) {
            (Some(Id(e)), _) => format!("no extraction \"{e}\" in this organisation"),
            (None, Some(Id(d))) => {
                format!("no extraction of document \"{d}\" in this organisation")
            }
            (None, None) => "no extraction of this run's document yet".into(),
        };
        ToolError::NotFound(format!("{what}; call run_extraction first"))
    }
}

impl TypedTool for UpdateExtractionField {
    const PROPOSABLE: bool = true;
    const REFINES: Refines = Refines::Always;

    /// `Set field 'total' of an extraction to 12.5`.
    async fn summary(&self, s: &mut Summary<'_>) -> sqlx::Result<Option<String>> {
        Ok(Some(format!(
            "Set field {} of an extraction to {}",
            quoted(s.str("path")),
            s.args()
                .get("value")
                .map(Value::to_string)
                .unwrap_or_default()
        )))
    }

    fn targets(&self) -> Vec<Target> {
        match self.extraction_id {
            Some(Id(id)) => vec![Target::Extraction(id)],
            None => vec![Target::Document(Id::uuid(self.document_id))],
        }
    }
    async fn run(self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        let path = self.path.as_str();
        let segs = path_segments(path)?;
        let e = self.target(ctx).await?.ok_or_else(|| self.not_found())?;
        if e.status != ExtractionStatus::Proposed {
            return Err(ToolError::Conflict(format!(
                "extraction {} was {} by a person and cannot be edited; run_extraction to \
                 propose a new one",
                e.id, e.status
            )));
        }
        let mut result = e.result.clone();
        set_path(&mut result, &segs, clean_json(&self.value))
            .map_err(|m| ToolError::Invalid(format!("cannot set {path}: {m}")))?;
        let schema_revid = revid(e.schema_id, e.schema_version);
        let schema = schemas::get(ctx.conn, ctx.org_id, e.schema_id, e.schema_version)
            .await?
            .ok_or_else(|| {
                ToolError::Conflict(format!(
                    "the schema {schema_revid} of extraction {} no longer exists; \
                     run_extraction again",
                    e.id
                ))
            })?;
        if let Err(errors) = validate_instance(inner_schema(&schema.response_format), &result) {
            return Err(ToolError::Invalid(format!(
                "after setting {path} the result no longer matches schema {schema_revid}: {}; \
                 nothing was changed",
                errors.join("; ")
            )));
        }
        let text = documents::get(ctx.conn, ctx.org_id, e.document_id, ground::MAX_CHARS)
            .await?
            .map(|d| d.text)
            .unwrap_or_default();
        let ungrounded = ground::ungrounded(&result, &text);
        let updated = store::update_result(ctx.conn, ctx.org_id, e.id, &result, &ungrounded)
            .await?
            .ok_or_else(|| self.not_found())?;
        let mut out = extraction_json(&updated);
        out["path"] = json!(path);
        Ok(out)
    }
    /// The extraction as it stands, locked: what the edit depends on.
    async fn snapshot(&self, ctx: &mut ToolCtx<'_>) -> Result<Value, ToolError> {
        Ok(match self.target(ctx).await? {
            Some(e) => json!({"exists": true, "extraction_id": e.id,
                              "status": e.status, "result": e.result}),
            None => json!({"exists": false}),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_setting() {
        assert_eq!(path_segments("/a/b~1c").unwrap(), vec!["a", "b/c"]);
        assert_eq!(
            path_segments("lines[0].price").unwrap(),
            vec!["lines", "0", "price"]
        );
        assert!(path_segments("").is_err());
        assert!(path_segments("a..b").is_err());
        // Review S1: a path of 200,000 segments is refused before anything is built.
        let deep = "a.".repeat(200_000) + "a";
        let e = path_segments(&deep).unwrap_err().to_string();
        assert!(e.contains("more than 32 segments"), "{e}");
        let ok = vec!["a"; MAX_PATH_SEGMENTS].join(".");
        assert_eq!(path_segments(&ok).unwrap().len(), MAX_PATH_SEGMENTS);
        let mut v = json!({"lines": [{"price": 1}], "total": 1});
        set_path(&mut v, &path_segments("lines.0.price").unwrap(), json!(2)).unwrap();
        set_path(&mut v, &path_segments("/vendor/name").unwrap(), json!("A")).unwrap();
        assert_eq!(
            v,
            json!({"lines": [{"price": 2}], "total": 1, "vendor": {"name": "A"}})
        );
        let err = |v: &mut Value, path: &str| {
            set_path(v, &path_segments(path).unwrap(), json!(1))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&mut v, "total.x"),
            "/total is 1, not an object or array: set it as a whole instead"
        );
        assert_eq!(
            err(&mut v, "lines.5"),
            "/lines is an array of 1: \"5\" is not an index in it"
        );
        assert_eq!(
            err(&mut v, "lines.x.price"),
            "/lines is an array of 1: \"x\" is not an index in it"
        );
        assert_eq!(set_path(&mut v, &[], json!(1)), Err(PathError::Empty));
    }

    #[test]
    fn answers_in_fences_and_prose() {
        assert_eq!(
            parse_json_answer("```json\n{\"a\":1}\n```"),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            parse_json_answer("Here: {\"a\":1} done"),
            Some(json!({"a": 1}))
        );
        assert_eq!(parse_json_answer("no json"), None);
    }
}
