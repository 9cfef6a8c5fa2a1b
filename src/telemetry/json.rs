//! JSON log lines with the trace and span ids of the span they were logged
//! in, so a log line leads to its trace in the tracing backend.

use std::fmt::Write as _;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// tracing-subscriber's JSON format plus `trace_id` and `span_id` when the
/// event happened inside an exported span.
pub struct JsonWithTrace {
    inner: Format<Json>,
}

impl JsonWithTrace {
    pub fn new() -> Self {
        JsonWithTrace {
            inner: tracing_subscriber::fmt::format().json(),
        }
    }
}

impl Default for JsonWithTrace {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, N> FormatEvent<S, N> for JsonWithTrace
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::with_capacity(256);
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let cx = opentelemetry::Context::current();
        let span = cx.span();
        let sc = span.span_context();
        let body = line.trim_end();
        match body.strip_suffix('}') {
            Some(open) if sc.is_valid() => {
                let mut out = String::with_capacity(line.len() + 80);
                out.push_str(open);
                let _ = write!(
                    out,
                    ",\"trace_id\":\"{}\",\"span_id\":\"{}\"}}",
                    sc.trace_id(),
                    sc.span_id()
                );
                writeln!(writer, "{out}")
            }
            _ => writer.write_str(&line),
        }
    }
}
