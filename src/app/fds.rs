//! File descriptors, planned rather than run out of. At start the soft
//! `RLIMIT_NOFILE` is raised to the hard limit (as Go's runtime does for
//! Teleport), both are logged, and the listeners' connection caps are
//! clamped so that what Lifeline needs besides them (the store's
//! connections, every auth server's health watch, the cluster watch,
//! probes, telemetry, its own files) always has a reserve: an agent fleet
//! larger than the limit is refused at the gRPC door and counted, instead
//! of leaving the API, the health watches and PostgreSQL without a
//! descriptor. Owns nothing after start.

use tracing::{info, warn};

use crate::config::Config;
pub use crate::stats::Descriptors;

/// Kept for everything that is not an agent's or an HTTP client's
/// connection: the store (PostgreSQL's pool or SQLite's files), the
/// cluster watch, one health watch per auth server, probes, OTLP, the
/// listening sockets, logs and the runtime's own.
pub const RESERVE: u64 = 256;
/// The HTTP listener gets at most this share of what is left, and never
/// fewer than [`MIN_HTTP`] connections.
const HTTP_SHARE: u64 = 8;
const MIN_HTTP: u64 = 16;

/// Raises the soft limit to the hard one; returns (soft before, soft now,
/// hard). An error leaves the limit as it was.
pub fn raise() -> (Option<u64>, Option<u64>, Option<u64>) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let was = getrlimit(Resource::Nofile);
    if was.current == was.maximum {
        return (was.current, was.current, was.maximum);
    }
    let want = Rlimit {
        current: was.maximum,
        maximum: was.maximum,
    };
    match setrlimit(Resource::Nofile, want) {
        Ok(()) => (was.current, was.maximum, was.maximum),
        Err(e) => {
            warn!(error = %e, soft = ?was.current, hard = ?was.maximum, "cannot raise the file descriptor limit");
            (was.current, was.current, was.maximum)
        }
    }
}

/// The caps that fit `soft` descriptors beside [`RESERVE`] and the
/// store's `store_connections`.
pub fn plan(
    cfg: &Config,
    (before, soft, hard): (Option<u64>, Option<u64>, Option<u64>),
    store_connections: u64,
) -> Descriptors {
    let (grpc_cfg, http_cfg) = (
        cfg.server.grpc_max_connections,
        cfg.server.max_http_connections,
    );
    let room = soft.map(|s| s.saturating_sub(RESERVE + store_connections));
    let (grpc, http) = match room {
        None => (grpc_cfg, http_cfg),
        Some(room) => {
            let http = (http_cfg as u64).min((room / HTTP_SHARE).max(MIN_HTTP));
            let grpc = (grpc_cfg as u64).min(room.saturating_sub(http).max(1));
            (as_usize(grpc), as_usize(http))
        }
    };
    let clamped = (grpc < grpc_cfg || http < http_cfg).then(|| {
        format!(
            "the file descriptor limit ({} soft, {} hard) holds {grpc} agent connections (server.grpc_max_connections {grpc_cfg}) and {http} HTTP connections (server.max_http_connections {http_cfg}), keeping {} for the store, health watches and the cluster watch: raise LimitNOFILE (ulimit -n) for more",
            show(soft),
            show(hard),
            RESERVE + store_connections
        )
    });
    Descriptors {
        soft_limit: soft,
        hard_limit: hard,
        raised_from: (before != soft).then_some(before).flatten(),
        grpc_max_connections: grpc,
        max_http_connections: http,
        clamped,
    }
}

fn as_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn show(n: Option<u64>) -> String {
    n.map_or_else(|| "unlimited".into(), |n| n.to_string())
}

/// Raises the limit, plans the caps, says so, and returns `cfg` with the
/// caps in force.
pub fn planned(cfg: &Config, store_connections: u64) -> (Config, Descriptors) {
    let d = plan(cfg, raise(), store_connections);
    info!(
        soft = %show(d.soft_limit),
        hard = %show(d.hard_limit),
        raised_from = ?d.raised_from,
        grpc_max_connections = d.grpc_max_connections,
        max_http_connections = d.max_http_connections,
        "file descriptors"
    );
    if let Some(why) = &d.clamped {
        warn!("connection caps lowered: {why}");
    }
    let mut cfg = cfg.clone();
    cfg.server.grpc_max_connections = d.grpc_max_connections;
    cfg.server.max_http_connections = d.max_http_connections;
    (cfg, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caps_leave_the_reserve_whatever_the_limit() {
        let cfg = Config::default();
        let d = plan(&cfg, (Some(1024), Some(1024), Some(1024)), 10);
        assert_eq!(d.raised_from, None);
        let used = (d.grpc_max_connections + d.max_http_connections) as u64;
        assert!(used + RESERVE + 10 <= 1024, "{d:?}");
        assert!(d
            .clamped
            .as_deref()
            .is_some_and(|c| c.contains("LimitNOFILE")));
        assert!(d.max_http_connections >= MIN_HTTP as usize);
        // Plenty: as configured.
        let d = plan(&cfg, (Some(1024), Some(1 << 20), Some(1 << 20)), 10);
        assert_eq!(d.grpc_max_connections, cfg.server.grpc_max_connections);
        assert_eq!(d.max_http_connections, cfg.server.max_http_connections);
        assert_eq!((d.raised_from, d.clamped), (Some(1024), None));
        assert_eq!(plan(&cfg, (None, None, None), 10).clamped, None);
        // Absurdly low: one agent connection, still the HTTP minimum.
        let d = plan(&cfg, (Some(64), Some(64), Some(64)), 10);
        assert_eq!(d.grpc_max_connections, 1);
        assert_eq!(d.max_http_connections, MIN_HTTP as usize);
    }
}
