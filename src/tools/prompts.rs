//! Tools of the `prompts` group. NOT IMPLEMENTED YET.

use super::Registry;

/// Registers this group's tools.
pub fn register(_r: &mut Registry) {}
