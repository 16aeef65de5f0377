//! Whether an endpoint constrains a round to its `response_format` beside `tools`, learnt from
//! its answers: the one place that says, for an endpoint and a model, whether constrained calls
//! (`llm.constrained_calls = "auto"`, `agent::constrain`) are worth sending there.
//!
//! Every endpoint is tried once per process and model (the first constrained round). Two
//! answers turn constrained calls off there for the rest of the process ([`fell_back`]):
//! - **refused**: HTTP 400/422 naming the `response_format` ([`is_refusal`]), as servers without
//!   JSON-Schema output beside tools answer (issue 28, item 5);
//! - **ignored**: the server took the format but enforced neither it nor `tool_choice` — an
//!   answer agentd cannot read as the format's (JSON of another shape, prose) and no tool call:
//!   some proxies, older vLLM and LM Studio builds, any server whose grammar is off (issue 47).
//!
//! Either way the run goes on with plain tool calls (the loop asks the round again without the
//! format) and later runs on that endpoint and model are sent none. A server that honours
//! `tool_choice` over the format (OpenAI answers with a tool call) is neither: its answer is used.
//! Keyed by the endpoint without credentials ([`crate::limits::endpoint_key`]) and the model (a
//! proxy routes models to different servers).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tracing::warn;

/// The HTTP endpoint a provider's call for a model goes to, and the provider entry that serves
/// it there (the label of its metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    /// The provider entry's name (`llm.providers[].name`; the adapter's name outside a chain).
    pub provider: &'a str,
    /// The base URL as configured (it may carry credentials: shown only as its key).
    pub url: &'a str,
}

/// Why a constrained round went without its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unconstrained {
    /// The server refused the format (HTTP 400/422 naming it).
    Refused,
    /// The server took the format and answered outside it, with no tool call.
    Ignored,
}

impl Unconstrained {
    /// The name in checkpoints, logs and the metric's `reason` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Refused => "refused",
            Self::Ignored => "ignored",
        }
    }

    /// The value [`Unconstrained::as_str`] wrote.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "refused" => Some(Self::Refused),
            "ignored" => Some(Self::Ignored),
            _ => None,
        }
    }
}

type Key = (String, String);

fn known() -> &'static Mutex<HashMap<Key, Unconstrained>> {
    static KNOWN: OnceLock<Mutex<HashMap<Key, Unconstrained>>> = OnceLock::new();
    KNOWN.get_or_init(Mutex::default)
}

fn key(url: &str, model: &str) -> Key {
    (crate::limits::endpoint_key(url), model.to_string())
}

/// Whether `endpoint` is still sent constrained calls for `model`: it has neither refused nor
/// ignored one in this process.
pub fn constrains(endpoint: Endpoint<'_>, model: &str) -> bool {
    !known()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&key(endpoint.url, model))
}

/// A run's constrained round went without its format (`why`): counted in
/// `agentd_provider_constraint_fallbacks_total{provider, reason}` and logged (a WARN naming the
/// endpoint without credentials and the model; never the request or the answer). With
/// `remember`, `endpoint` is sent no constrained call for `model` from now on (an answer cut
/// at the output cap says nothing about the server: the run alone goes on without).
pub fn fell_back(
    endpoint: Option<Endpoint<'_>>,
    provider: &str,
    model: &str,
    why: Unconstrained,
    remember: bool,
) {
    let provider = endpoint.map_or(provider, |e| e.provider).to_string();
    metrics::counter!("agentd_provider_constraint_fallbacks_total",
        "provider" => provider.clone(), "reason" => why.as_str())
    .increment(1);
    let shown = endpoint.map(|e| crate::limits::endpoint_key(e.url));
    let endpoint_shown = shown.as_deref().unwrap_or("none");
    let what = match why {
        Unconstrained::Refused => "the server refused a response_format beside tools",
        Unconstrained::Ignored => {
            "the server answered a constrained round outside its response_format, with no tool call"
        }
    };
    match (endpoint, remember) {
        (Some(e), true) => {
            known()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key(e.url, model), why);
            warn!(%provider, endpoint = endpoint_shown, model, reason = why.as_str(),
                "{what}; the run goes on with plain tool calls, and constrained calls are off for \
                 this endpoint and model from now on");
        }
        _ => warn!(%provider, endpoint = endpoint_shown, model, reason = why.as_str(),
            "{what}; the run goes on with plain tool calls"),
    }
}

/// Whether `e` is a server refusing a request's `response_format` as invalid: HTTP 400 or 422
/// whose message names it (`response_format`, `json_schema`). Another 400 (a context too long)
/// is the call's own failure, not the endpoint's answer to the format.
pub fn is_refusal(e: &super::LlmError) -> bool {
    let m = e.message.to_lowercase();
    !e.retryable
        && (m.contains("http 400") || m.contains("http 422"))
        && [
            "response_format",
            "response format",
            "json_schema",
            "json schema",
        ]
        .iter()
        .any(|w| m.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LlmError;

    #[test]
    fn a_refusal_names_the_format() {
        let refused = LlmError::new(
            "openai",
            "HTTP 400 from http://h/v1: invalid_request_error: response_format is not supported \
             with tools (param: response_format)",
            false,
        );
        assert!(is_refusal(&refused));
        let other = LlmError::new(
            "openai",
            "HTTP 400 from http://h/v1: maximum context length exceeded",
            false,
        );
        assert!(!is_refusal(&other), "another 400 is the call's own");
        let retryable = LlmError::new("openai", "HTTP 400 response_format", true);
        assert!(!is_refusal(&retryable));
    }

    #[test]
    fn an_endpoint_is_remembered_per_model_without_its_credentials() {
        let e = Endpoint {
            provider: "lenient",
            url: "http://user:pw@schema-output.test:1/v1/?k=1",
        };
        let same = Endpoint {
            provider: "lenient",
            url: "http://schema-output.test:1/v1",
        };
        assert!(constrains(e, "m1"));
        fell_back(Some(e), "lenient", "m1", Unconstrained::Ignored, false);
        assert!(
            constrains(e, "m1"),
            "an answer cut at the cap is not remembered"
        );
        fell_back(Some(e), "lenient", "m1", Unconstrained::Ignored, true);
        assert!(
            !constrains(same, "m1"),
            "the same endpoint without its credentials"
        );
        assert!(constrains(same, "m2"), "another model behind the endpoint");
        for w in [Unconstrained::Refused, Unconstrained::Ignored] {
            assert_eq!(Unconstrained::parse(w.as_str()), Some(w));
        }
    }
}
