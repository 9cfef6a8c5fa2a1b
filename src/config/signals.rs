//! `[signals]`: discovery, automatic and periodic reconnects, graceful
//! tunnel closing, the agents' stream limits and the load-balancing policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{backoff_range, invalid, positive, ConfigError, Ratio};
use crate::domain::LbPolicy;

/// The longest periodic reconnect interval: thirty days.
pub const MAX_RECONNECT_INTERVAL: Duration = Duration::from_secs(30 * 86_400);

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// The client load-balancing policy served by `GetServiceConfig`, in
    /// RFD 0226's JSON form; empty means pick_first.
    /// Env: `LIFELINE_GRPC_CLIENT_LB_POLICY`.
    pub grpc_client_lb_policy: String,
    /// Send every agent the full proxy list on every change and every
    /// `full_discovery_interval` (Teleport before RFD 0226), instead of deltas.
    /// Env: `LIFELINE_FULL_DISCOVERY`.
    pub full_discovery: bool,
    /// With `full_discovery`, how often every agent gets the full list
    /// even without a change.
    #[serde(with = "humantime_serde")]
    pub full_discovery_interval: Duration,
    /// Proxy changes remembered for deltas; a stream further behind gets one
    /// full Discovery instead.
    pub discovery_backlog: usize,
    /// A delta naming more proxies than this is sent as one full Discovery.
    pub max_delta_proxies: usize,
    /// Reconnect agents stranded with `no_live_tunnel` or holding a tunnel to
    /// an expired proxy. Env: `LIFELINE_AUTO_RECONNECT`.
    pub auto_reconnect: bool,
    /// The first wait before an automatic reconnect is sent again to an
    /// agent still stranded (doubling, up to 50 % jitter).
    #[serde(with = "humantime_serde")]
    pub reconnect_backoff_base: Duration,
    /// The longest wait between automatic reconnects of one agent.
    #[serde(with = "humantime_serde")]
    pub reconnect_backoff_cap: Duration,
    /// Automatic reconnects pause when more than this share of agents turn
    /// stranded within `storm_window`.
    pub storm_share: Ratio,
    /// The window the storm guard counts strandings in, and how long it
    /// keeps automatic reconnects paused after a trip.
    #[serde(with = "humantime_serde")]
    pub storm_window: Duration,
    /// Send every agent a Reconnect at this interval plus jitter; off when
    /// unset or `"off"`. Env: `LIFELINE_RECONNECT_INTERVAL`.
    #[serde(
        deserialize_with = "duration_or_off",
        serialize_with = "super::redact::duration_or_off"
    )]
    pub reconnect_interval: Option<Duration>,
    /// At most this many periodic reconnects per second.
    pub periodic_max_per_second: u32,
    /// Close tunnels beyond an agent's `desired_tunnels` once the proxy
    /// topology has been still for `graceful_threshold` (randomised up to
    /// twice that). Env: `LIFELINE_GRACEFUL_TUNNEL_CLOSING`.
    pub graceful_tunnel_closing: bool,
    /// How long the proxy topology must be still before tunnels are
    /// closed gracefully.
    #[serde(with = "humantime_serde")]
    pub graceful_threshold: Duration,
    /// Signals queued per agent stream; a full queue makes a signal
    /// `undeliverable` rather than growing memory.
    pub signal_queue: usize,
    /// A signal not acked within this is recorded as `timeout`.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
    /// How long an agent may take to send `Hello`.
    #[serde(with = "humantime_serde")]
    pub hello_timeout: Duration,
    /// Largest gRPC message accepted from or sent to an agent.
    pub max_message_bytes: usize,
    /// How long a restart-only peer (a sidecar) may take to ack a
    /// Reconnect: it restarts its agent and waits for it to turn ready.
    #[serde(with = "humantime_serde")]
    pub restart_ack_timeout: Duration,
    /// Restarts in flight across the fleet at once, on top of the storm
    /// guard: a share of the sidecars connected and an absolute cap, the
    /// smaller wins (at least one). Each cluster counts its own restarts,
    /// and pauses on its own failures.
    pub max_restarts_in_flight: RestartLimit,
    /// The least time between two automatic restarts of one agent (match
    /// the sidecars' `cooldown`).
    #[serde(with = "humantime_serde")]
    pub restart_retry: Duration,
}

/// `signals.max_restarts_in_flight`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RestartLimit {
    /// The share of connected sidecars whose agents may be restarting.
    pub share: Ratio,
    /// And never more than this many.
    pub cap: usize,
}

impl Default for RestartLimit {
    fn default() -> Self {
        RestartLimit {
            share: Ratio::TWENTIETH,
            cap: 20,
        }
    }
}

impl RestartLimit {
    /// Restarts that may be in flight with `sidecars` connected.
    pub fn of(&self, sidecars: usize) -> usize {
        let share = (self.share.get() * sidecars as f64).ceil() as usize;
        share.min(self.cap).max(1)
    }
}

impl Default for SignalsConfig {
    fn default() -> Self {
        SignalsConfig {
            grpc_client_lb_policy: String::new(),
            full_discovery: false,
            full_discovery_interval: Duration::from_secs(120),
            discovery_backlog: 4096,
            max_delta_proxies: 512,
            auto_reconnect: true,
            reconnect_backoff_base: Duration::from_secs(1),
            reconnect_backoff_cap: Duration::from_secs(16),
            storm_share: Ratio::HALF,
            storm_window: Duration::from_secs(10),
            reconnect_interval: None,
            periodic_max_per_second: 50,
            graceful_tunnel_closing: false,
            graceful_threshold: Duration::from_secs(30 * 60),
            signal_queue: 64,
            ack_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(10),
            max_message_bytes: 4 * 1024 * 1024,
            restart_ack_timeout: Duration::from_secs(180),
            max_restarts_in_flight: RestartLimit::default(),
            restart_retry: Duration::from_secs(600),
        }
    }
}

/// A duration, or `off` (or empty) for none: how the file and the
/// environment both spell an interval that can be turned off.
pub(super) fn parse_duration_or_off(text: &str) -> Result<Option<Duration>, String> {
    match text.trim() {
        "" | "off" => Ok(None),
        t => humantime::parse_duration(t)
            .map(Some)
            .map_err(|e| format!("invalid duration {t:?}: {e}")),
    }
}

fn duration_or_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration_or_off(&text).map_err(serde::de::Error::custom)
}

impl SignalsConfig {
    /// The parsed `grpc_client_lb_policy`.
    pub fn lb_policy(&self) -> Result<LbPolicy, ConfigError> {
        LbPolicy::parse(&self.grpc_client_lb_policy)
            .map_err(|e| invalid("signals.grpc_client_lb_policy", e.to_string()))
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.lb_policy()?;
        positive(
            "signals.full_discovery_interval",
            self.full_discovery_interval,
        )?;
        if self.discovery_backlog < 16 {
            return Err(invalid("signals.discovery_backlog", "must be at least 16"));
        }
        if self.max_delta_proxies == 0 {
            return Err(invalid("signals.max_delta_proxies", "must be at least 1"));
        }
        backoff_range(
            "signals.reconnect_backoff",
            self.reconnect_backoff_base,
            self.reconnect_backoff_cap,
        )?;
        if self.storm_share.get() == 0.0 {
            return Err(invalid("signals.storm_share", "must be in (0, 1], got 0"));
        }
        positive("signals.storm_window", self.storm_window)?;
        if let Some(i) = self.reconnect_interval {
            if i < Duration::from_secs(1) {
                return Err(invalid("signals.reconnect_interval", "must be at least 1s"));
            }
            if i > MAX_RECONNECT_INTERVAL {
                return Err(invalid("signals.reconnect_interval", "must be at most 30d"));
            }
        }
        if self.periodic_max_per_second == 0 {
            return Err(invalid(
                "signals.periodic_max_per_second",
                "must be at least 1",
            ));
        }
        positive("signals.graceful_threshold", self.graceful_threshold)?;
        if self.signal_queue == 0 {
            return Err(invalid("signals.signal_queue", "must be at least 1"));
        }
        positive("signals.ack_timeout", self.ack_timeout)?;
        positive("signals.hello_timeout", self.hello_timeout)?;
        positive("signals.restart_ack_timeout", self.restart_ack_timeout)?;
        positive("signals.restart_retry", self.restart_retry)?;
        if self.max_restarts_in_flight.cap == 0 {
            return Err(invalid(
                "signals.max_restarts_in_flight.cap",
                "must be at least 1",
            ));
        }
        if self.max_message_bytes < 64 * 1024 {
            return Err(invalid(
                "signals.max_message_bytes",
                "must be at least 65536",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smaller of the share and the cap wins, and one restart may
    /// always go.
    #[test]
    fn restart_limit_is_the_smaller_of_share_and_cap_and_at_least_one() {
        let l = RestartLimit::default();
        assert_eq!(l.of(100), 5, "5% of 100");
        assert_eq!(l.of(10_000), 20, "the cap");
        assert_eq!(l.of(3), 1, "5% of 3, rounded up");
        assert_eq!(l.of(0), 1, "never none");
    }

    #[test]
    fn a_zero_restart_cap_is_refused_naming_it() {
        let mut c = SignalsConfig::default();
        c.max_restarts_in_flight.cap = 0;
        let e = c.validate().expect_err("refused").to_string();
        assert!(e.contains("signals.max_restarts_in_flight.cap"), "{e}");
    }
}
