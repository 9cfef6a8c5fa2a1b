//! The simulator's own reading and writing of the wire: timestamps, the
//! service config an agent receives, trace context and its retry backoff.
//! Written here, apart from Lifeline's own conversions and rules, so that a
//! bug in Lifeline is not mirrored by the simulator meant to catch it.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use rand::Rng;

use lifeline::clock::Ts;
use lifeline::proto::v1 as pb;

/// The OpenTelemetry service simulated agents export as.
pub const SERVICE: &str = lifeline::telemetry::otlp::SIM_SERVICE;

pub fn timestamp(t: Ts) -> prost_types::Timestamp {
    let (secs, micros) = (t.0.div_euclid(1_000_000), t.0.rem_euclid(1_000_000));
    prost_types::Timestamp {
        seconds: secs,
        nanos: i32::try_from(micros * 1000).unwrap_or(0),
    }
}

pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// What an agent makes of a `ServiceConfig`: whether to watch its auth
/// server's health and move on NOT_SERVING, and the health service to
/// watch. Anything it does not understand means pick_first.
pub fn reconnect_policy(c: &pb::ServiceConfig) -> (bool, String) {
    use pb::teleport_pick_healthy_config::Mode;
    let reconnect = c.load_balancing_config.iter().any(|l| {
        matches!(
            &l.config,
            Some(pb::load_balancer_config::Config::TeleportPickHealthy(p))
                if p.mode == Mode::Reconnect as i32
        )
    });
    let service = c
        .health_check_config
        .as_ref()
        .map(|h| h.service_name.clone())
        .unwrap_or_default();
    (reconnect, service)
}

/// The trace context a signal carries, as an OpenTelemetry context.
pub fn trace_parent(carrier: &HashMap<String, String>) -> Option<opentelemetry::Context> {
    if carrier.is_empty() {
        return None;
    }
    let cx = TraceContextPropagator::new().extract(carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// A simulated agent's wait before reconnect attempt `attempt`, as a
/// Teleport agent waits: exponential from `base` up to `cap`, then up to
/// 50 % more at random.
pub fn backoff(base: Duration, cap: Duration, attempt: u32, rng: &mut impl Rng) -> Duration {
    let step = base.saturating_mul(1u32 << attempt.min(20)).min(cap);
    step.mul_f64(rng.random_range(1.0..1.5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn timestamps_keep_microseconds_and_negative_times() {
        let t = timestamp(Ts(-1));
        assert_eq!((t.seconds, t.nanos), (-1, 999_999_000));
        let t = timestamp(Ts(1_500_000));
        assert_eq!((t.seconds, t.nanos), (1, 500_000_000));
    }

    #[test]
    fn backoff_stays_under_its_ceiling() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (base, cap) = (Duration::from_millis(100), Duration::from_secs(1));
        for attempt in 0..40 {
            let d = backoff(base, cap, attempt, &mut rng);
            let step = base.saturating_mul(1 << attempt.min(20)).min(cap);
            assert!(d >= step && d < step.mul_f64(1.5), "{attempt}: {d:?}");
        }
    }

    #[test]
    fn an_unknown_config_means_pick_first() {
        assert_eq!(
            reconnect_policy(&pb::ServiceConfig::default()),
            (false, String::new())
        );
    }
}
