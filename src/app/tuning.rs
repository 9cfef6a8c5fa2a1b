//! Knobs beyond the config file.

use std::sync::Arc;

use crate::store;
use crate::telemetry::SpanCounters;

/// Knobs that tests and benches set beyond the config file.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Capacity of the state-change broadcast.
    pub change_capacity: usize,
    /// Batches that may wait for the store writer.
    pub writer_depth: usize,
    /// How long anyone waits for a database connection and a query's
    /// answer. On a paused test clock a real thread's few milliseconds can
    /// span seconds of virtual time, so tests lengthen them.
    pub waits: store::Waits,
    /// The counters of the trace exporter this process sends spans
    /// through (all zero when it exports none); `/metrics` shows them.
    pub spans: Arc<SpanCounters>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            change_capacity: 4096,
            writer_depth: 4,
            waits: store::Waits::PRODUCTION,
            spans: Arc::default(),
        }
    }
}
