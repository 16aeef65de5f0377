//! Tools of the `extraction` group. NOT IMPLEMENTED YET.

use super::Registry;

/// Registers this group's tools.
pub fn register(_r: &mut Registry) {}
