//! Goals: what a finished run of a kind has made, read from what the run stored (never from
//! what the model says). auto_create's goal is a schema (created or reused), a prompt and an
//! extraction for its document; the nightly `proactive_suggestion`'s is a read of the org's
//! overview and a suggestion (or an action proposed for approval), while the overview shows
//! something worth one and the night has room for it; a re-proposal run's (`approval_expiry`
//! with a stale approval) is the action proposed again (or any write it proposed or made),
//! while what the action is about still exists. The same state
//! gives the working-state block each round carries, the next step named in nudges and errors,
//! and guided mode's tool subset. Every kind that runs a model declares one; a run without a
//! goal (goals off) ends when the model answers.

use super::RunSpec;
use crate::kinds::{self, JobKind};
use crate::store::{approvals, auto_create, documents, schemas, suggestions};
use crate::tools::documents::{
    DeleteDocument, GetDocument, GetOcrText, ListDocuments, UpdateDocument,
};
use crate::tools::extraction::{GetExtractionResult, RunExtraction, UpdateExtractionField};
use crate::tools::help::{HelpPrompts, HelpSchemas};
use crate::tools::prompts::CreatePrompt;
use crate::tools::schemas::{CreateSchema, ListSchemas};
use crate::tools::suggestions::{CreateSuggestion, OrgOverview};
use crate::tools::tags::{CreateTag, ListTags};
use crate::tools::{Declaration, revid};
use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

/// One part of a kind's goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Schema,
    Prompt,
    Extraction,
    /// The nightly run's read of the org (`org_overview`, a tool without arguments).
    Overview,
    /// The nightly run's suggestion.
    Suggestion,
    /// A re-proposal run's action, proposed again.
    Reproposal,
}

/// A re-proposal run's stale approval: the action to propose again and the document it is
/// about (none: not about a document).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reproposal {
    pub tool: String,
    pub document_id: Option<Uuid>,
}

impl Part {
    /// What the part is, as a nudge names it.
    pub fn noun(&self) -> &'static str {
        match self {
            Part::Schema => "schema",
            Part::Prompt => "prompt",
            Part::Extraction => "extraction",
            Part::Overview => "overview",
            Part::Suggestion => "suggestion",
            Part::Reproposal => "re-proposal",
        }
    }

    /// Tools that make this part (guided mode offers these and the read tools). The schema
    /// stage offers `create_prompt` too: passing an existing schema's revid to it is how a
    /// schema is reused.
    pub fn tools(&self) -> &'static [&'static str] {
        match self {
            // create_schema validates (no validate_schema); the working state names the ids
            // and fields (no get_schema / get_prompt).
            Part::Schema => &[
                CreateSchema::NAME,
                ListSchemas::NAME,
                HelpSchemas::NAME,
                CreatePrompt::NAME,
            ],
            Part::Prompt => &[CreatePrompt::NAME, HelpPrompts::NAME],
            Part::Extraction => &[RunExtraction::NAME],
            Part::Overview => &[OrgOverview::NAME],
            Part::Suggestion => &[
                OrgOverview::NAME,
                CreateSuggestion::NAME,
                ListDocuments::NAME,
                GetDocument::NAME,
            ],
            // The re-proposal job's tools: the action is one of them.
            Part::Reproposal => &[
                GetDocument::NAME,
                ListTags::NAME,
                UpdateDocument::NAME,
                CreateTag::NAME,
                DeleteDocument::NAME,
                RunExtraction::NAME,
            ],
        }
    }
}

/// Read tools offered in every guided round (the document text is in the first message; more
/// pages come from `get_ocr_text`).
pub const GUIDED_READ_TOOLS: [&str; 1] = [GetOcrText::NAME];

/// Tools guided mode offers once the goal is met: check and correct the extraction, or answer.
pub const GUIDED_DONE_TOOLS: [&str; 2] = [GetExtractionResult::NAME, UpdateExtractionField::NAME];

/// Where a run stands against its kind's goal.
#[derive(Debug, Clone, Default)]
pub struct GoalState {
    /// Parts still missing, in the order they are made.
    pub missing: Vec<Part>,
    /// `"<id>:<version>"` of the run's schema, prompt; the extraction's id.
    pub schema: Option<String>,
    pub schema_fields: Vec<String>,
    pub prompt: Option<String>,
    pub extraction: Option<Uuid>,
    /// A refine: the proposal's prompt, which gets a new version (not a new prompt) when the
    /// schema changed.
    pub revise_prompt: Option<Uuid>,
    /// The nightly run: the suggestions it made (`None` for auto_create).
    pub suggestions: Option<i64>,
    /// A re-proposal run: the stale approval's tool (`None` for other kinds).
    pub repropose: Option<String>,
}

impl GoalState {
    /// True when nothing is missing.
    pub fn met(&self) -> bool {
        self.missing.is_empty()
    }

    /// The next step, as an instruction naming the tool (and the id to pass).
    pub fn next_step(&self) -> String {
        match self.missing.first() {
            Some(Part::Schema) => "call `create_schema` with the fields worth extracting from \
                 the document (or pass the schema_revid of a fitting schema from `list_schemas` \
                 to `create_prompt`)"
                .to_string(),
            Some(Part::Prompt) => match self.revise_prompt {
                Some(p) => format!(
                    "call `update_prompt` with prompt_id \"{p}\" and schema_revid \"{}\"",
                    self.schema.as_deref().unwrap_or("?")
                ),
                None => format!(
                    "call `create_prompt` with schema_revid \"{}\"",
                    self.schema.as_deref().unwrap_or("?")
                ),
            },
            Some(Part::Extraction) => format!(
                "call `run_extraction` with prompt_revid \"{}\"",
                self.prompt.as_deref().unwrap_or("?")
            ),
            Some(Part::Overview) => "call `org_overview` (it takes no arguments)".to_string(),
            Some(Part::Suggestion) => "call `create_suggestion` with a title, a message and the \
                 document the most useful action the overview shows is about"
                .to_string(),
            Some(Part::Reproposal) => format!(
                "call `{}` again with arguments that fit the current data (read it first if \
                 you have not); it is stored for a person to approve",
                self.repropose.as_deref().unwrap_or("?")
            ),
            None => "answer with a one-paragraph summary of what you proposed".to_string(),
        }
    }

    /// Whether the working-state block names what the run's calls made (auto_create's ids and
    /// fields), so their results may shrink to one line; the nightly block does not (the
    /// overview stays readable for every suggestion).
    pub fn names_what_calls_made(&self) -> bool {
        self.suggestions.is_none() && self.repropose.is_none()
    }

    /// The tools guided mode offers once the goal is met.
    pub fn done_tools(&self) -> &'static [&'static str] {
        match (self.suggestions, &self.repropose) {
            (Some(_), _) => Part::Suggestion.tools(),
            (None, Some(_)) => Part::Reproposal.tools(),
            (None, None) => &GUIDED_DONE_TOOLS,
        }
    }

    /// The short working-state block sent at the end of each request.
    pub fn block(&self) -> String {
        if let Some(n) = self.suggestions {
            return format!(
                "[run state] suggestions written by this run: {n}. Next: {}.",
                self.next_step()
            );
        }
        if let Some(tool) = &self.repropose {
            let state = match self.met() {
                true => "done",
                false => "not yet proposed",
            };
            return format!(
                "[run state] re-proposal of `{tool}`: {state}. Next: {}.",
                self.next_step()
            );
        }
        let schema = match &self.schema {
            Some(r) => format!("{r} (fields: {})", self.schema_fields.join(", ")),
            None => "none yet".into(),
        };
        let prompt = self.prompt.as_deref().unwrap_or("none yet");
        let extraction = self
            .extraction
            .map(|e| e.to_string())
            .unwrap_or_else(|| "none yet".into());
        format!(
            "[run state] schema: {schema}; prompt: {prompt}; extraction: {extraction}. Next: {}.",
            self.next_step()
        )
    }

    /// The nudge sent when the model answered in prose before the goal was met.
    pub fn nudge(&self) -> String {
        let missing: Vec<&str> = self.missing.iter().map(Part::noun).collect();
        format!(
            "Not finished: this run has no {} yet. Do not answer in prose; {} now.",
            missing.join(", no "),
            self.next_step()
        )
    }
}

/// The goal state of `run_id` at `now`, or `None` for kinds without a declared goal.
pub async fn state(
    pool: &PgPool,
    spec: &RunSpec,
    run_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<GoalState>> {
    if spec.settings.goals
        && spec.kind == kinds::ProactiveSuggestion::NAME
        && let Some(night) = spec.night
    {
        return nightly(pool, spec, run_id, night, now).await.map(Some);
    }
    if spec.settings.goals
        && let Some(r) = &spec.repropose
    {
        return reproposal(pool, spec, run_id, r).await.map(Some);
    }
    let (true, Some(doc)) = (
        spec.settings.goals && spec.kind == kinds::AutoCreate::NAME,
        spec.document_id,
    ) else {
        return Ok(None);
    };
    let mut conn = pool.acquire().await?;
    let a = auto_create::proposal(&mut conn, spec.org_id, run_id, doc, &spec.start).await?;
    let mut g = GoalState {
        revise_prompt: spec.start.prompt.filter(|_| spec.start.revise).map(|p| p.0),
        ..GoalState::default()
    };
    if let Some((id, v)) = a.schema() {
        g.schema = Some(revid(id, v));
        if let Some(row) = schemas::get(&mut conn, spec.org_id, id, v).await? {
            g.schema_fields = row
                .response_format
                .pointer("/json_schema/schema/properties")
                .and_then(|p| p.as_object())
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
        }
    } else {
        g.missing.push(Part::Schema);
    }
    if let Some((id, v)) = a.prompt() {
        g.prompt = Some(revid(id, v));
    } else {
        g.missing.push(Part::Prompt);
    }
    g.extraction = a.proposed_extraction_id;
    if g.extraction.is_none() {
        g.missing.push(Part::Extraction);
    }
    Ok(Some(g))
}

/// The nightly goal: a suggestion by this run, unless the org's overview (the one
/// `org_overview` shows) has nothing worth one or the night's suggestions are all written —
/// then a run that writes none has done its job.
async fn nightly(
    pool: &PgPool,
    spec: &RunSpec,
    run_id: Uuid,
    night: chrono::NaiveDate,
    now: DateTime<Utc>,
) -> sqlx::Result<GoalState> {
    let mut conn = pool.acquire().await?;
    let written = suggestions::made_by_run(&mut conn, spec.org_id, run_id).await?;
    let mut g = GoalState {
        suggestions: Some(written),
        ..GoalState::default()
    };
    if written > 0 {
        return Ok(g);
    }
    let days = crate::tools::suggestions::WAITING_AFTER_DAYS;
    let o = suggestions::overview(&mut conn, spec.org_id, now, night, days, 1).await?;
    let room = spec
        .max_suggestions
        .is_none_or(|cap| o.suggestions_this_night < i64::from(cap));
    if o.has_signals() && room {
        if !suggestions::overview_read(&mut conn, spec.org_id, run_id).await? {
            g.missing.push(Part::Overview);
        }
        g.missing.push(Part::Suggestion);
    }
    Ok(g)
}

/// The re-proposal goal: the action proposed again (or any write this run proposed or made),
/// unless the document it is about is gone — then there is nothing to propose.
async fn reproposal(
    pool: &PgPool,
    spec: &RunSpec,
    run_id: Uuid,
    r: &Reproposal,
) -> sqlx::Result<GoalState> {
    let mut conn = pool.acquire().await?;
    let mut g = GoalState {
        repropose: Some(r.tool.clone()),
        ..GoalState::default()
    };
    if approvals::acted_by_run(&mut conn, spec.org_id, run_id).await? > 0 {
        return Ok(g);
    }
    let subject = match r.document_id {
        Some(d) => documents::exists(&mut conn, spec.org_id, d).await?,
        None => true,
    };
    if subject {
        g.missing.push(Part::Reproposal);
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nudge_and_block_name_what_is_missing_and_the_next_tool() {
        let g = GoalState {
            missing: vec![Part::Prompt, Part::Extraction],
            schema: Some("s:1".into()),
            schema_fields: vec!["total".into()],
            ..GoalState::default()
        };
        assert_eq!(
            g.nudge(),
            "Not finished: this run has no prompt, no extraction yet. Do not answer in prose; \
             call `create_prompt` with schema_revid \"s:1\" now."
        );
        assert!(
            g.block()
                .contains("schema: s:1 (fields: total); prompt: none yet")
        );
        assert!(!g.met());
    }
}
