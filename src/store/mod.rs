//! All domain SQL lives here (sqlx), one file per table group. Every query filters by org.

pub mod documents;
pub mod extractions;
pub mod prompts;
pub mod schemas;
pub mod suggestions;
pub mod tags;
pub mod approvals;
pub mod runs;
pub mod auto_create;
pub mod orgs;
