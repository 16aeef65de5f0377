//! All domain SQL lives here (sqlx), one file per table group. Every query filters by org.

pub mod api_keys;
pub mod api_reads;
pub mod approvals;
pub mod auto_create;
pub mod documents;
pub mod extractions;
pub mod orgs;
pub mod prompts;
pub mod runs;
pub mod schemas;
pub mod status;
pub mod suggestions;
pub mod tags;
