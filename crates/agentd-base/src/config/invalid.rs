//! A value a setting or an input field cannot take, typed: the key (of the service config, a
//! job file, or a field such as a webhook subscription's `url`) and the message, which names the
//! key with the bound, the choices or the fix. The file or variable a setting came from is added
//! by [`super::ConfigError`] / [`crate::catalog::CatalogError`].

/// A value out of range, not one of its choices, malformed, or in conflict with another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The key, e.g. `worker.lease_secs`.
    pub key: String,
    /// What is wrong (it names the key).
    pub message: String,
}

impl Invalid {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// `key` (whose value is `v`) must be at least `min`.
pub fn at_least(key: &str, v: u64, min: u64) -> Result<(), Invalid> {
    if v < min {
        return Err(Invalid::new(
            key,
            format!("{key} must be ≥ {min} (got {v})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_below_its_bound_names_key_bound_and_value() {
        assert_eq!(at_least("worker.lease_secs", 2, 2), Ok(()));
        let e = at_least("worker.lease_secs", 1, 2).unwrap_err();
        assert_eq!(e.key, "worker.lease_secs");
        assert_eq!(e.to_string(), "worker.lease_secs must be ≥ 2 (got 1)");
    }
}
