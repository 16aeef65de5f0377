//! `[otel]`: where traces go (`crate::telemetry`). The standard OpenTelemetry variables set the
//! same keys over the file ([`STANDARD_VARIABLES`]); `AGENTD_OTEL__<KEY>` over both. An empty
//! `endpoint` (the default) exports nothing.

use super::{Invalid, OtlpProtocol};
use serde::Deserialize;

/// The standard variables and the `[otel]` key each sets.
pub const STANDARD_VARIABLES: [(&str, &str); 4] = [
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "endpoint"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "protocol"),
    ("OTEL_SERVICE_NAME", "service_name"),
    ("OTEL_RESOURCE_ATTRIBUTES", "resource_attributes"),
];

/// Most `key=value` pairs in `resource_attributes`, and most bytes of it: resource attributes
/// ride on every export, and the value may come from anyone's environment.
pub const MAX_RESOURCE_ATTRIBUTES: usize = 64;
const MAX_RESOURCE_ATTRIBUTES_BYTES: usize = 4096;

/// Trace export over OTLP.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtelConfig {
    /// The collector's OTLP endpoint (`http://collector:4318` for HTTP, which adds
    /// `/v1/traces`; `http://collector:4317` for gRPC); empty: no export.
    pub endpoint: String,
    /// `http/protobuf` or `grpc`.
    pub protocol: OtlpProtocol,
    /// The `service.name` resource attribute; empty: the one in `resource_attributes`, else
    /// `agentd` (the precedence `OTEL_SERVICE_NAME` has over `OTEL_RESOURCE_ATTRIBUTES`).
    pub service_name: String,
    /// More resource attributes as `key=value,key=value`, values percent-encoded (the form of
    /// `OTEL_RESOURCE_ATTRIBUTES`), e.g. `deployment.environment.name=prod`.
    pub resource_attributes: String,
}

impl Default for OtelConfig {
    fn default() -> Self {
        Self {
            endpoint: String::new(),
            protocol: OtlpProtocol::HttpProtobuf,
            service_name: String::new(),
            resource_attributes: String::new(),
        }
    }
}

impl OtelConfig {
    /// Whether traces are exported.
    pub fn enabled(&self) -> bool {
        !self.endpoint.trim().is_empty()
    }

    /// The `service.name` to report.
    pub fn service_name(&self) -> String {
        if !self.service_name.trim().is_empty() {
            return self.service_name.trim().to_string();
        }
        self.attributes()
            .ok()
            .and_then(|a| a.into_iter().find(|(k, _)| k == "service.name"))
            .map(|(_, v)| v)
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "agentd".to_string())
    }

    /// `resource_attributes` as pairs, or what is wrong with it (naming the key).
    pub fn attributes(&self) -> Result<Vec<(String, String)>, Invalid> {
        let key = "otel.resource_attributes";
        let bad = |why: String| Invalid::new(key, format!("{key}: {why}"));
        let text = self.resource_attributes.trim();
        if text.len() > MAX_RESOURCE_ATTRIBUTES_BYTES {
            return Err(bad(format!(
                "at most {MAX_RESOURCE_ATTRIBUTES_BYTES} bytes (got {})",
                text.len()
            )));
        }
        let mut out = Vec::new();
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(bad(format!(
                    "{pair:?} is not key=value (pairs are separated by commas)"
                )));
            };
            let k = k.trim();
            if k.is_empty() {
                return Err(bad(format!("{pair:?} has an empty key")));
            }
            let v = percent_decode(v.trim())
                .ok_or_else(|| bad(format!("the value of {k} is not valid percent-encoding")))?;
            out.push((k.to_string(), v));
        }
        if out.len() > MAX_RESOURCE_ATTRIBUTES {
            return Err(bad(format!(
                "at most {MAX_RESOURCE_ATTRIBUTES} attributes (got {})",
                out.len()
            )));
        }
        Ok(out)
    }

    /// The checks of [`super::Config::validate`] for this section.
    pub fn validate(&self) -> Result<(), Invalid> {
        let endpoint = self.endpoint.trim();
        if !endpoint.is_empty() {
            let uri = endpoint.parse::<http::Uri>().ok();
            let scheme = uri.as_ref().and_then(|u| u.scheme_str());
            let host = uri.as_ref().and_then(|u| u.host()).unwrap_or("");
            if !matches!(scheme, Some("http" | "https")) || host.is_empty() {
                return Err(Invalid::new(
                    "otel.endpoint",
                    format!(
                        "otel.endpoint must be the collector's http:// or https:// URL, e.g. \
                         http://localhost:4318, or empty for no export (got {endpoint:?})"
                    ),
                ));
            }
        }
        if self.service_name.len() > 255 {
            return Err(Invalid::new(
                "otel.service_name",
                format!(
                    "otel.service_name must be at most 255 bytes (got {})",
                    self.service_name.len()
                ),
            ));
        }
        self.attributes().map(|_| ())
    }
}

/// `%XX` sequences decoded (UTF-8 as a whole); `None` for a broken sequence or invalid UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(s.len());
    let mut it = s.bytes();
    while let Some(b) = it.next() {
        if b == b'%' {
            let hex = [it.next()?, it.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(attrs: &str) -> OtelConfig {
        OtelConfig {
            resource_attributes: attrs.into(),
            ..OtelConfig::default()
        }
    }

    #[test]
    fn resource_attributes_are_pairs_with_percent_encoded_values() {
        let c = with(" deployment.environment.name=prod , team=a%20b%2Cc,");
        assert_eq!(
            c.attributes().unwrap(),
            vec![
                ("deployment.environment.name".into(), "prod".into()),
                ("team".into(), "a b,c".into())
            ]
        );
        for (bad, why) in [
            ("team", "is not key=value"),
            ("=x", "empty key"),
            ("a=%2", "percent-encoding"),
            ("a=%zz", "percent-encoding"),
            ("a=%ff", "percent-encoding"),
        ] {
            let e = with(bad).validate().unwrap_err();
            assert_eq!(e.key, "otel.resource_attributes");
            assert!(e.message.contains(why), "{bad}: {}", e.message);
        }
        let many = (0..65).map(|i| format!("k{i}=v")).collect::<Vec<_>>();
        assert!(with(&many.join(",")).validate().is_err());
    }

    #[test]
    fn the_service_name_falls_back_to_the_attributes_then_agentd() {
        assert_eq!(with("").service_name(), "agentd");
        assert_eq!(with("service.name=billing").service_name(), "billing");
        let named = OtelConfig {
            service_name: "agentd-eu".into(),
            ..with("service.name=billing")
        };
        assert_eq!(named.service_name(), "agentd-eu");
    }

    #[test]
    fn an_endpoint_is_an_http_url_or_empty() {
        for ok in [
            "",
            "http://localhost:4318",
            "https://otel.example.com",
            "http://[::1]:4317",
        ] {
            let c = OtelConfig {
                endpoint: ok.into(),
                ..OtelConfig::default()
            };
            assert_eq!(c.validate(), Ok(()), "{ok}");
        }
        for bad in ["localhost:4318", "ftp://x", "http://", "not a url"] {
            let c = OtelConfig {
                endpoint: bad.into(),
                ..OtelConfig::default()
            };
            let e = c.validate().unwrap_err();
            assert_eq!(e.key, "otel.endpoint", "{bad}");
            assert!(e.message.contains(&format!("{bad:?}")), "{}", e.message);
        }
    }
}
