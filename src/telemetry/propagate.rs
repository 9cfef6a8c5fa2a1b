//! W3C trace context across process boundaries: the failure trace an agent's
//! episode belongs to, carried from classification to each signal, into
//! `Signal.trace_context` on the wire, and back from the agent's ack.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// A span to continue later or elsewhere: the parent of spans created after
/// it ended, in another task or another process.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceRef(SpanContext);

impl TraceRef {
    /// The exported span behind `span`, if it is one.
    pub fn of(span: &tracing::Span) -> Option<TraceRef> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then_some(TraceRef(sc))
    }

    /// The current span's, if exported.
    pub fn current() -> Option<TraceRef> {
        if !super::exporting() {
            return None;
        }
        TraceRef::of(&tracing::Span::current())
    }

    pub fn context(&self) -> Context {
        Context::new().with_remote_span_context(self.0.clone())
    }

    /// Makes `span` a child of this one (before `span` is first entered).
    pub fn adopt(&self, span: &tracing::Span) {
        let _ = span.set_parent(self.context());
    }

    pub fn trace_id(&self) -> String {
        self.0.trace_id().to_string()
    }

    /// `traceparent` (and `tracestate`) for the wire.
    pub fn carrier(&self) -> HashMap<String, String> {
        let mut map = HashMap::new();
        TraceContextPropagator::new().inject_context(&self.context(), &mut map);
        map
    }

    /// The context a peer sent, if it is a valid `traceparent`.
    pub fn from_carrier(map: &HashMap<String, String>) -> Option<TraceRef> {
        if map.is_empty() {
            return None;
        }
        let cx = TraceContextPropagator::new().extract(map);
        let sc = cx.span().span_context().clone();
        sc.is_valid().then_some(TraceRef(sc))
    }
}

/// Creates a span that continues `parent` (or the current span when
/// `parent` is `None`); `make` is only called while exporting.
pub fn child(parent: Option<&TraceRef>, make: impl FnOnce() -> tracing::Span) -> tracing::Span {
    if !super::exporting() {
        return tracing::Span::none();
    }
    let span = make();
    if let Some(p) = parent {
        p.adopt(&span);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    #[test]
    fn traceparent_round_trip() {
        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let t = TraceRef(sc);
        let c = t.carrier();
        assert_eq!(
            c.get("traceparent").map(String::as_str),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(TraceRef::from_carrier(&c), Some(t));
    }

    #[test]
    fn garbage_is_no_parent() {
        for bad in [
            "",
            "00-zz-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        ] {
            let m = HashMap::from([("traceparent".to_string(), bad.to_string())]);
            assert_eq!(TraceRef::from_carrier(&m), None, "{bad}");
        }
        assert_eq!(TraceRef::from_carrier(&HashMap::new()), None);
    }
}
