//! W3C trace context across the queue: an API request's `traceparent` is parsed (strictly: a
//! malformed header is ignored, as the W3C spec asks), the request's span continues it, and the
//! job it enqueues stores the context it should continue (`agentd_jobs.traceparent`, migration
//! 0071). The worker's `job` span is then a child of that context on the job's first attempt;
//! a later attempt (a retry, a reclaimed or released job) is a new trace with a link to it, so
//! one producer's trace does not grow a retry hours later and the retry still leads back.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The request header.
pub const TRACEPARENT: &str = "traceparent";

/// A `traceparent` value: `version-traceid-spanid-flags` in lowercase hex (version `00`: exactly
/// that; a later version may append fields, which are ignored). `None` for anything else,
/// including the all-zero ids the spec calls invalid.
pub fn parse(header: &str) -> Option<SpanContext> {
    let header = header.trim();
    // 55 characters for version 00; a later version may be longer, but not unboundedly.
    if header.len() < 55 || header.len() > 512 || !header.is_ascii() {
        return None;
    }
    let mut parts = header.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) || version == "ff" {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let cx = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    cx.is_valid().then_some(cx)
}

/// `cx` as a version-00 `traceparent`.
pub fn format(cx: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        cx.trace_id(),
        cx.span_id(),
        (cx.trace_flags() & TraceFlags::SAMPLED).to_u8()
    )
}

/// The `traceparent` a job enqueued here should store: the current span's context when this
/// process exports (the API request's span, itself a child of the caller's), else the caller's
/// own header when it is valid (a worker that exports still continues the caller's trace).
pub fn for_job(incoming: Option<&str>) -> Option<String> {
    if super::exporting() {
        let cx = Span::current().context();
        let span = cx.span();
        let own = span.span_context();
        if own.is_valid() {
            return Some(format(own));
        }
    }
    incoming.and_then(parse).map(|cx| format(&cx))
}

/// Makes `span` (not entered yet) continue the caller's trace from its `traceparent`.
pub fn continue_request(span: &Span, incoming: Option<&str>) {
    if let Some(cx) = incoming.and_then(parse) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(cx));
    }
}

/// Places a job's span (not entered yet) in its producer's trace: on the first attempt a child
/// of the stored context; on a later one the start of a new trace, linked to that context.
pub fn continue_job(span: &Span, stored: Option<&str>, attempt: i32) {
    if !super::exporting() {
        return;
    }
    let Some(cx) = stored.and_then(parse) else {
        return;
    };
    if attempt <= 1 {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(cx));
    } else {
        span.add_link(cx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_round_trips() {
        let cx = parse(GOOD).unwrap();
        assert_eq!(
            cx.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert!(cx.is_sampled() && cx.is_remote());
        assert_eq!(format(&cx), GOOD);
        let unsampled = GOOD.replace("-01", "-00");
        assert_eq!(format(&parse(&unsampled).unwrap()), unsampled);
        // A later version may carry more fields; only ours are kept.
        let later = GOOD.replacen("00-", "01-", 1) + "-extra";
        assert_eq!(format(&parse(&later).unwrap()), GOOD);
    }

    #[test]
    fn anything_else_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47é-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        assert_eq!(parse(&"0".repeat(100_000)), None);
    }

    #[test]
    fn without_export_a_job_stores_the_callers_header() {
        assert_eq!(for_job(Some(GOOD)).as_deref(), Some(GOOD));
        assert_eq!(for_job(Some("garbage")), None);
        assert_eq!(for_job(None), None);
    }
}
