//! The subject of a run: what it may write (and read) inside its org. An `auto_create` run
//! writes only its document, that document's extractions and the schemas and prompts it
//! created itself; a suggestion's proposed action stays on the suggestion's document. Each tool
//! declares what a call touches ([`Target`], from [`Tool::targets`]) and [`check`] decides in
//! one place, for the loop, the registry and proposals alike.

use super::{Tool, ToolCtx, ToolError};
use crate::store::prompts::PromptRow;
use crate::store::schemas::SchemaRow;
use crate::store::subject as store;
use crate::store::versions::{self, Versioned};
use serde_json::Value;
use uuid::Uuid;

/// What a run may touch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Subject {
    /// Anything in the org (a person deciding; runs whose writes are all proposals).
    #[default]
    Org,
    /// One document (`auto_create`).
    Document {
        /// The run's document.
        document_id: Uuid,
        /// Whether other documents' text and extractions may be read (job file key
        /// `agent.read_other_documents`, off by default).
        read_other_documents: bool,
        /// A refine's proposal: the schema and prompt the run may write new versions of
        /// although another run (or a person) created them.
        revisable: Revisable,
        /// `create_schema` reuses the org's schema for the same kind of document (a new
        /// version of it when fields are missing) instead of adding one (`agent.reuse_schemas`;
        /// never in a refine, whose schema is the proposal's).
        reuse_schemas: bool,
    },
    /// A suggestion's proposed action: only the suggestion's document (none: no document at
    /// all, and no schema or prompt).
    Suggestion {
        /// The suggestion's document.
        document_id: Option<Uuid>,
    },
}

impl Subject {
    /// Whether `create_schema` reuses the org's schema for the same kind of document.
    pub fn reuses_schemas(&self) -> bool {
        matches!(
            self,
            Subject::Document {
                reuse_schemas: true,
                ..
            }
        )
    }
}

/// The schema and prompt a refine run may write new versions of (its document's proposal):
/// nothing else it did not create.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Revisable {
    pub schema: Option<Uuid>,
    pub prompt: Option<Uuid>,
}

impl Revisable {
    /// What `start` lets a run revise: its schema and prompt when it is a refine.
    pub fn of(start: &crate::store::auto_create::StartFrom) -> Self {
        match start.revise {
            true => Revisable {
                schema: start.schema.map(|s| s.0),
                prompt: start.prompt.map(|p| p.0),
            },
            false => Revisable::default(),
        }
    }
}

/// A job kind's rules for calls outside the subject (from its job file).
#[derive(Debug, Clone, Copy)]
pub struct SubjectPolicy {
    /// `agent.read_other_documents`: may an `auto_create` run read other documents?
    pub read_other_documents: bool,
    /// `agent.off_subject`: a write outside the subject is refused (`deny`, the default) or
    /// stored as a pending approval (`propose`; `auto` is read as `propose`).
    pub off_subject: crate::catalog::PolicyDecision,
    /// `agent.reuse_schemas`: may `create_schema` reuse the org's schema for the same kind of
    /// document?
    pub reuse_schemas: bool,
}

impl Default for SubjectPolicy {
    fn default() -> Self {
        Self {
            read_other_documents: false,
            off_subject: crate::catalog::PolicyDecision::Deny,
            reuse_schemas: false,
        }
    }
}

impl SubjectPolicy {
    /// From a job file's `[agent]` section.
    pub fn from_agent(a: &crate::catalog::AgentSpec) -> Self {
        Self {
            read_other_documents: a.read_other_documents,
            off_subject: a.off_subject,
            reuse_schemas: a.reuse_schemas,
        }
    }

    /// The subject of a run about `document_id` (none: the whole org) that may revise
    /// `revisable`.
    pub fn subject(&self, document_id: Option<Uuid>, revisable: Revisable) -> Subject {
        match document_id {
            Some(document_id) => Subject::Document {
                document_id,
                read_other_documents: self.read_other_documents,
                revisable,
                reuse_schemas: self.reuse_schemas && revisable == Revisable::default(),
            },
            None => Subject::Org,
        }
    }
}

/// What one call touches, as declared by its tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Reads a document's text or extractions (`None`: the run's document).
    ReadDocument(Option<Uuid>),
    /// Writes a document or its extractions (`None`: the run's document).
    Document(Option<Uuid>),
    /// Writes an extraction.
    Extraction(Uuid),
    /// Writes a schema (a new version or a deletion).
    Schema(Uuid),
    /// Writes a prompt.
    Prompt(Uuid),
    /// Writes org-wide state that no run owns (e.g. deleting a tag).
    Shared(&'static str),
}

/// Checks every target of `tool(args)` against `ctx.subject`. `Err(OffSubject)` names what is
/// outside it; ids that do not exist pass (the tool itself answers "not found").
pub async fn check(ctx: &mut ToolCtx<'_>, tool: &dyn Tool, args: &Value) -> Result<(), ToolError> {
    let subject = ctx.subject;
    if subject == Subject::Org {
        return Ok(());
    }
    let (own_doc, read_others, suggestion, revisable) = match subject {
        Subject::Org => return Ok(()),
        Subject::Document {
            document_id,
            read_other_documents,
            revisable,
            ..
        } => (Some(document_id), read_other_documents, false, revisable),
        Subject::Suggestion { document_id } => (document_id, true, true, Revisable::default()),
    };
    let what = match own_doc {
        Some(d) if suggestion => format!("this suggestion is about document {d}"),
        Some(d) => format!("this run may only change its own document {d}"),
        None => "this suggestion is about no document".to_string(),
    };
    let off = |m: String| Err(ToolError::OffSubject(format!("{m}: {what}")));
    for target in tool.targets(args) {
        match target {
            Target::ReadDocument(d) => {
                let d = d.or(ctx.document_id);
                if !read_others && d.is_some() && d != own_doc && exists(ctx, d).await? {
                    return Err(ToolError::OffSubject(format!(
                        "reading document {} is off for this run (it may read only its own \
                         document {}; job file key agent.read_other_documents)",
                        d.unwrap_or_default(),
                        own_doc.unwrap_or_default()
                    )));
                }
            }
            Target::Document(d) => {
                let d = d.or(ctx.document_id);
                if d.is_some() && d != own_doc && exists(ctx, d).await? {
                    return off(format!("document {}", d.unwrap_or_default()));
                }
            }
            Target::Extraction(e) => {
                if let Some(d) = store::extraction_document(ctx.conn, ctx.org_id, e).await?
                    && Some(d) != own_doc
                {
                    return off(format!("extraction {e} belongs to document {d}"));
                }
            }
            Target::Schema(s) if revisable.schema == Some(s) => {}
            Target::Prompt(p) if revisable.prompt == Some(p) => {}
            Target::Schema(s) => {
                if let Some(m) = not_created::<SchemaRow>(ctx, s, suggestion).await? {
                    return off(m);
                }
            }
            Target::Prompt(p) => {
                if let Some(m) = not_created::<PromptRow>(ctx, p, suggestion).await? {
                    return off(m);
                }
            }
            Target::Shared(thing) => {
                return off(format!("{thing} is shared by the whole organisation"));
            }
        }
    }
    Ok(())
}

/// Why a change to the org's `R` `id` is off the subject: it exists and this run did not
/// create it (`suggestion`: nothing is a suggestion's own). `None` when it is not.
async fn not_created<R: Versioned>(
    ctx: &mut ToolCtx<'_>,
    id: Uuid,
    suggestion: bool,
) -> Result<Option<String>, ToolError> {
    let creator = versions::creator::<R>(ctx.conn, ctx.org_id, id).await?;
    Ok(match creator {
        Some(run) if suggestion || run.is_none() || run != ctx.run_id => {
            Some(format!("{} {id} was not created by this run", R::KIND))
        }
        _ => None,
    })
}

/// Whether document `d` exists in the org: another org's id is "not found" (the tool says so),
/// never "outside the subject".
async fn exists(ctx: &mut ToolCtx<'_>, d: Option<Uuid>) -> Result<bool, ToolError> {
    match d {
        Some(d) => Ok(crate::store::documents::exists(ctx.conn, ctx.org_id, d).await?),
        None => Ok(false),
    }
}
