//! All domain SQL lives here (sqlx), one file per table group. Every query filters by org.

pub mod agent_loop;
pub mod api_keys;
pub mod api_reads;
pub mod approval_life;
pub mod approvals;
pub mod auto_create;
pub mod budget;
pub mod console_reads;
pub mod documents;
pub mod events;
pub mod extractions;
pub mod org_settings;
pub mod orgs;
pub mod pii;
pub mod prompts;
pub mod provider_limits;
pub mod runs;
pub mod schemas;
pub mod sql;
pub mod states;
pub mod status;
pub mod subject;
pub mod suggestions;
pub mod tags;
pub mod versions;
pub mod webhooks;
