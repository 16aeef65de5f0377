//! SQL for `documents`. NOT IMPLEMENTED YET.
