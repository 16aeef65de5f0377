//! SQL for `extractions`. NOT IMPLEMENTED YET.
