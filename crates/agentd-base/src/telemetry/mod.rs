//! Logging and traces: the `tracing` subscriber (text or JSON lines to stderr) and, when
//! `[otel]` names a collector, an OpenTelemetry layer that exports agentd's spans over OTLP
//! (HTTP/protobuf or gRPC), batched on the SDK's thread and flushed by
//! [`Telemetry::shutdown`]. `propagation` carries a W3C `traceparent` from an API request,
//! through the job row, into the worker's `job` span.
//!
//! What reaches the collector: the spans of agentd's own modules at INFO and above (the API
//! request, `job`, `agent.run`, `agent.round`, `tool`, the provider call) with their fields, and
//! their WARN/ERROR events — the same fields the log has, none of them a document's text or a
//! personal value. Spans of other crates (sqlx, hyper, tonic: the exporter's own requests) never
//! do.

pub mod propagation;

use crate::config::{OtelConfig, OtlpProtocol};
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};
use tracing_subscriber::filter::{EnvFilter, LevelFilter};
use tracing_subscriber::prelude::*;

/// Set once the export is installed: code that only prepares spans for export (the API's
/// request span, a job's remote parent) skips that work otherwise.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported by this process.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The trace export of this process, if any: [`Telemetry::shutdown`] sends what is buffered.
#[must_use = "call shutdown() before the process exits, or buffered spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// The exporter could not be built from a configuration that passed validation (e.g. TLS).
#[derive(Debug, thiserror::Error)]
#[error("otel: cannot export traces: {0}")]
pub struct TelemetryError(String);

impl Telemetry {
    /// No export (logging only).
    pub fn none() -> Self {
        Self { provider: None }
    }

    /// Exports the spans still buffered and stops the exporter (waits for the collector up to
    /// the exporter's timeout). Called before the process exits.
    pub async fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        EXPORTING.store(false, Ordering::Relaxed);
        // The SDK blocks on its export thread; never on a runtime worker.
        match tokio::task::spawn_blocking(move || provider.shutdown()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("agentd: otel: the last spans were not exported: {e}"),
            Err(e) => eprintln!("agentd: otel: shutdown failed: {e}"),
        }
    }
}

/// Installs the global subscriber: the log (`format` text or json, filtered by `AGENTD_LOG`,
/// then `RUST_LOG`, then `default_filter`) and, if `otel` names an endpoint, the export.
/// Must run inside the tokio runtime (the gRPC channel lives on it). A second call changes
/// nothing (tests install once per process).
pub fn install(
    format: &str,
    default_filter: &str,
    otel: Option<&OtelConfig>,
) -> Result<Telemetry, TelemetryError> {
    let filter = EnvFilter::try_from_env("AGENTD_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(default_filter));
    let Some(otel) = otel.filter(|o| o.enabled()) else {
        // The log alone, its filter global (what every callsite's cached interest is).
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(log_layer(format))
            .try_init();
        return Ok(Telemetry::none());
    };
    let provider = provider(otel)?;
    // Each layer its own filter: the log's, and agentd's spans for the export whatever the log
    // shows. `try_init` fails if some `log` logger was set before, after installing the
    // subscriber: what counts is whether it was.
    let before = tracing::dispatcher::has_been_set();
    let export = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("agentd"))
        .with_filter(Exported);
    let _ = tracing_subscriber::registry()
        .with(log_layer(format).with_filter(filter))
        .with(export)
        .try_init();
    if before || !tracing::dispatcher::has_been_set() {
        // Another subscriber was there first: nothing of ours would see a span.
        let _ = provider.shutdown();
        return Ok(Telemetry::none());
    }
    EXPORTING.store(true, Ordering::Relaxed);
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// The log: text or JSON lines to stderr, coloured only on a terminal ([`ansi`]).
fn log_layer<S>(format: &str) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use std::io::IsTerminal;
    let colour = ansi(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let log = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    if format == "json" {
        log.json().flatten_event(true).boxed()
    } else {
        log.boxed()
    }
}

/// Whether the log writes ANSI colour codes: only when stderr is a terminal, and not when
/// `NO_COLOR` is set to anything but the empty string (<https://no-color.org>). A log sent to a
/// file, a pipe or a collector gets plain text (issue 46, item 7).
fn ansi(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// The export layer's filter: agentd's spans (its crates' targets) at INFO and above, and its WARN and ERROR events
/// (as span events).
///
/// Its callsites are `sometimes` interesting, never `always`: a per-layer filter hands its
/// decision to the layer through a thread-local that `enabled` sets, and a callsite cached as
/// `always` skips `enabled`, so the layers would read whatever the last `enabled` call left
/// there — after sqlx's `log_enabled!` (through `tracing-log`), "disabled", and spans would
/// vanish from the export and the log at random (tokio-rs/tracing#2519). With one filter
/// saying `sometimes`, every callsite both layers want is asked each time.
struct Exported;

impl<S> tracing_subscriber::layer::Filter<S> for Exported {
    fn enabled(&self, meta: &Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        exported(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if exported(meta) {
            Interest::sometimes()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
}

/// What [`Exported`] takes.
fn exported(meta: &Metadata<'_>) -> bool {
    // The facade and binary (`agentd::…`) and the crates by layer (`agentd_worker::…`, …).
    let t = meta.target();
    let ours = t == "agentd" || t.starts_with("agentd::") || t.starts_with("agentd_");
    let level = if meta.is_span() {
        Level::INFO
    } else {
        Level::WARN
    };
    ours && *meta.level() <= level
}

/// The tracer provider: an OTLP exporter for `o` behind the SDK's batch processor.
fn provider(o: &OtelConfig) -> Result<SdkTracerProvider, TelemetryError> {
    let endpoint = o.endpoint.trim();
    let failed = |e: opentelemetry_otlp::ExporterBuildError| TelemetryError(e.to_string());
    let exporter = match o.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()
            .map_err(failed)?,
        OtlpProtocol::Grpc => {
            let builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint);
            let builder = if endpoint.starts_with("https://") {
                use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
                builder.with_tls_config(ClientTlsConfig::new().with_webpki_roots())
            } else {
                builder
            };
            builder.build().map_err(failed)?
        }
    };
    let attributes = o.attributes().map_err(|e| TelemetryError(e.to_string()))?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_attributes(
            attributes
                .into_iter()
                .filter(|(k, _)| k != "service.name")
                .map(|(k, v)| KeyValue::new(k, v)),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_service_name(o.service_name())
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::callsite::Identifier;
    use tracing::field::FieldSet;
    use tracing::metadata::Kind;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        use std::ffi::OsStr;
        assert!(ansi(true, None));
        assert!(
            ansi(true, Some(OsStr::new(""))),
            "an empty NO_COLOR is unset"
        );
        assert!(!ansi(true, Some(OsStr::new("1"))));
        assert!(!ansi(false, None), "a file or a pipe gets no escape codes");
        assert!(!ansi(false, Some(OsStr::new("1"))));
    }

    struct Site;
    impl tracing::Callsite for Site {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &Metadata<'_> {
            unreachable!()
        }
    }
    static SITE: Site = Site;

    fn meta(target: &'static str, level: Level, kind: Kind) -> Metadata<'static> {
        Metadata::new(
            "m",
            target,
            level,
            None,
            None,
            None,
            FieldSet::new(&[], Identifier(&SITE)),
            kind,
        )
    }

    #[test]
    fn only_agentds_spans_and_warnings_are_exported() {
        assert!(exported(&meta("agentd::agent", Level::INFO, Kind::SPAN)));
        assert!(exported(&meta(
            "agentd_agent::agent",
            Level::INFO,
            Kind::SPAN
        )));
        assert!(exported(&meta(
            "agentd_llm::traced",
            Level::WARN,
            Kind::EVENT
        )));
        assert!(!exported(&meta("agentd::agent", Level::DEBUG, Kind::SPAN)));
        assert!(exported(&meta("agentd::jobs", Level::WARN, Kind::EVENT)));
        assert!(!exported(&meta("agentd::jobs", Level::INFO, Kind::EVENT)));
        // The exporter's own HTTP and gRPC clients: never (no spans about sending spans).
        assert!(!exported(&meta(
            "hyper_util::client",
            Level::INFO,
            Kind::SPAN
        )));
        assert!(!exported(&meta(
            "tonic::transport",
            Level::ERROR,
            Kind::EVENT
        )));
        assert!(!exported(&meta("agentdx", Level::INFO, Kind::SPAN)));
    }
}
