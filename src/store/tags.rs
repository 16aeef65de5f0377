//! SQL for `tags`. NOT IMPLEMENTED YET.
