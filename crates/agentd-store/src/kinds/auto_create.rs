//! `auto_create`: the agent proposes a schema, a prompt and an extraction for one document
//! (handler: `jobs/auto_create.rs`).

use super::{JobKind, Unique};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind.
pub struct AutoCreate;

/// The payload: `{org_id, document_id, force?, schema_id?, prompt_id?, tag_ids?, refine?}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Payload {
    pub org_id: Uuid,
    pub document_id: Uuid,
    /// Run even if the document already has a proposal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Start from this schema (its latest version), reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<Uuid>,
    /// Start from this prompt (its latest version), reused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<Uuid>,
    /// Tags for the prompt the run makes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_ids: Vec<Uuid>,
    /// A reviewer's refine of the document's proposal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refine: Option<Refine>,
}

/// The `refine` part of an `auto_create` payload. The reviewer's words are not in it: they are
/// the row of `refine_requests` named by the job's id (migration 0100), which erasure and
/// retention reach (security review D13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Refine {
    /// Who asked (`key <id>`, `cli:<who>`), as the audit row names them.
    pub requested_by: String,
}

impl JobKind for AutoCreate {
    const NAME: &'static str = "auto_create";
    type Payload = Payload;

    /// One waiting or running job per document; a forced run gets a key of its own (it runs
    /// even when one is waiting).
    fn unique(p: &Payload) -> Option<Unique> {
        let key = if p.force {
            format!("{}:{}:{}", Self::NAME, p.document_id, Uuid::new_v4())
        } else {
            format!("{}:{}", Self::NAME, p.document_id)
        };
        Some(Unique {
            key,
            until_purged: false,
        })
    }
}

/// What a producer names to start from (part of the `auto_create` payload and of the upload).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartIds {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tag_ids: Vec<Uuid>,
}

impl StartIds {
    /// True when nothing is named.
    pub fn is_empty(&self) -> bool {
        self.schema_id.is_none() && self.prompt_id.is_none() && self.tag_ids.is_empty()
    }
}

impl Payload {
    /// What the payload names to start from.
    pub fn start_ids(&self) -> StartIds {
        StartIds {
            schema_id: self.schema_id,
            prompt_id: self.prompt_id,
            tag_ids: self.tag_ids.clone(),
        }
    }

    /// The payload of an `AutoCreate` job of `document_id` (of `org_id`) starting from `ids`
    /// (`force`: run even if the document has a proposal).
    pub fn new(org_id: Uuid, document_id: Uuid, force: bool, ids: &StartIds) -> Self {
        Payload {
            org_id,
            document_id,
            force,
            schema_id: ids.schema_id,
            prompt_id: ids.prompt_id,
            tag_ids: ids.tag_ids.clone(),
            refine: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_leaves_out_what_is_not_set_and_the_key_names_the_document() {
        let (org, doc) = (Uuid::new_v4(), Uuid::new_v4());
        let p = Payload {
            org_id: org,
            document_id: doc,
            ..Payload::default()
        };
        let job = AutoCreate::job(&p);
        assert_eq!(job.kind, "auto_create");
        assert_eq!(
            job.payload,
            serde_json::json!({"org_id": org, "document_id": doc})
        );
        assert_eq!(job.unique_key, Some(format!("auto_create:{doc}")));
        assert!(!job.unique_until_purged);
        let forced = AutoCreate::job(&Payload { force: true, ..p });
        let key = forced.unique_key.unwrap_or_default();
        assert!(key.starts_with(&format!("auto_create:{doc}:")), "{key}");
        assert_eq!(forced.payload["force"], serde_json::json!(true));
    }
}
