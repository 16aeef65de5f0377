//! SQL for `prompts`. NOT IMPLEMENTED YET.
