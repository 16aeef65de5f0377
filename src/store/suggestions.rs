//! SQL for `suggestions`. NOT IMPLEMENTED YET.
