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
            set(base_sec, &section, k, v);
        }
    }
    Ok(())
}

/// Sets `section.key` to `value`; `[llm.prices]` is set model by model over the built-in list
/// prices (a file that prices one model keeps the others' list prices).
pub(super) fn set(sec: &mut toml::Table, section: &str, key: String, value: toml::Value) {
    if let (PRICES, toml::Value::Table(models)) = ((section, key.as_str()), &value)
        && let Some(toml::Value::Table(base)) = sec.get_mut(&key)
    {
        for (model, price) in models {
            base.insert(model.clone(), price.clone());
        }
        return;
    }
    sec.insert(key, value);
}

/// The models a layer (a file's table, or an environment value of `llm.prices`) prices.
pub(super) fn priced_models(section: &str, key: &str, value: &toml::Value) -> Vec<String> {
    match ((section, key), value) {
        (PRICES, toml::Value::Table(models)) => models.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `(section, key)` of the price table.
const PRICES: (&str, &str) = ("llm", "prices");
