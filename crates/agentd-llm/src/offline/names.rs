//! The tools the offline model calls, by name. It plays a model, and a model names tools in
//! the text it writes (model output is one of the places tool names are read); it sits below
//! `tools` in the module layers, so it cannot use the tools' `NAME` constants. These are its
//! only tool names: `tests/it/tool_names.rs` checks each is a registered tool, so renaming a tool
//! fails that test instead of silently changing the offline eval.

pub const CREATE_PROMPT: &str = "create_prompt";
pub const CREATE_SCHEMA: &str = "create_schema";
pub const CREATE_SUGGESTION: &str = "create_suggestion";
pub const GET_DOCUMENT: &str = "get_document";
pub const LIST_TAGS: &str = "list_tags";
pub const ORG_OVERVIEW: &str = "org_overview";
pub const RUN_EXTRACTION: &str = "run_extraction";
pub const UPDATE_DOCUMENT: &str = "update_document";
pub const UPDATE_PROMPT: &str = "update_prompt";
pub const UPDATE_SCHEMA: &str = "update_schema";

/// Every name above.
pub const ALL: &[&str] = &[
    CREATE_PROMPT,
    CREATE_SCHEMA,
    CREATE_SUGGESTION,
    GET_DOCUMENT,
    LIST_TAGS,
    ORG_OVERVIEW,
    RUN_EXTRACTION,
    UPDATE_DOCUMENT,
    UPDATE_PROMPT,
    UPDATE_SCHEMA,
];
