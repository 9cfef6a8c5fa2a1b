//! The chaos loop of `lifeline demo`: every `period`, one of [`STEPS`]
//! (the demo's banner prints the same list), then again with the next
//! proxies and auth server.
//!
//! With the demo's three proxies and two tunnels per agent, the second
//! proxy's stop strands no one: by then Lifeline has moved the agents off
//! the first, so each holds a tunnel to the third, live proxy. They are
//! degraded, and those already on the one live proxy *wait for a live
//! proxy* (moving them cannot help). With two proxies, it strands them.
//!
//! Agents Lifeline reconnects while an auth server is NOT_SERVING attach
//! to the other one; from the second round on, every agent is on the
//! auth server that fails next, so its failure strands the whole fleet at
//! once and trips the storm guard, as it should for a mass stranding.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tracing::info;

use super::cluster::{auth_name, proxy_name, SimCluster};
use lifeline::domain::Kind;

/// One round, in order; the last waits two periods (so the outage
/// outlasts the TTL).
pub const STEPS: [&str; 5] = [
    "a proxy stops heartbeating (its agents turn degraded when its TTL runs out, and Lifeline moves them)",
    "an auth server turns NOT_SERVING (its agents are stranded at once)",
    "the auth server heals",
    "a second proxy stops heartbeating (its agents stay degraded: they hold a tunnel to a live proxy)",
    "both proxies heal",
];

pub async fn run(sim: SimCluster, period: Duration, stop: CancellationToken) {
    let (proxies, auths) = (sim.spec().proxies, sim.spec().auth_servers);
    let mut round = 0usize;
    loop {
        let a = (proxies > 0).then(|| proxy_name(round % proxies));
        let c = (proxies > 1).then(|| proxy_name((round + 1) % proxies));
        let auth = (auths > 0).then(|| auth_name(round % auths));
        for (i, step) in STEPS.iter().enumerate() {
            let wait = if i == 4 { period * 2 } else { period };
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            info!(round, step, "chaos");
            match i {
                0 => {
                    if let Some(p) = &a {
                        sim.pause_heartbeats(p).await;
                    }
                }
                1 => {
                    if let Some(x) = &auth {
                        sim.set_auth_status(x, ServingStatus::NotServing).await;
                    }
                }
                2 => {
                    if let Some(x) = &auth {
                        sim.set_auth_status(x, ServingStatus::Serving).await;
                    }
                }
                3 => {
                    if let Some(p) = &c {
                        sim.pause_heartbeats(p).await;
                    }
                }
                _ => {
                    for p in a.iter().chain(c.iter()) {
                        sim.resume_heartbeats(Kind::Proxy, p).await;
                    }
                }
            }
        }
        round += 1;
    }
}
