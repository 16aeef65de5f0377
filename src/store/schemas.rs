//! SQL for `schemas`. NOT IMPLEMENTED YET.
