//! How the layers of settings combine: a file's or the environment's sections and keys over
//! the defaults (only keys the defaults have), and an environment value read as TOML.

use super::ConfigError;

/// An environment override's value: TOML (a number, a boolean, an array, a quoted string), or
/// else the text itself.
pub(super) fn parse_env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// `over`'s keys written over `base`'s; a section or key `base` does not have is an error
/// naming `source`.
pub(super) fn merge(
    base: &mut toml::Table,
    over: toml::Table,
    source: &str,
) -> Result<(), ConfigError> {
    for (section, value) in over {
        let toml::Value::Table(fields) = value else {
            return Err(ConfigError::new(
                source,
                format!("`{section}` must be a [section]"),
            ));
        };
        let Some(toml::Value::Table(base_sec)) = base.get_mut(&section) else {
            return Err(ConfigError::new(
                source,
                format!("unknown section [{section}]"),
            ));
        };
        for (k, v) in fields {
            if !base_sec.contains_key(&k) {
                return Err(ConfigError::new(
                    source,
                    format!("unknown key `{section}.{k}`"),
                ));
            }
            base_sec.insert(k, v);
        }
    }
    Ok(())
}
