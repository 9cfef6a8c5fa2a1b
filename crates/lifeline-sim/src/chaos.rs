//! The chaos loop of `lifeline demo`: every `period`, one step of
//! 1. a proxy stops heartbeating (its agents turn degraded once it expires),
//! 2. an auth server turns NOT_SERVING (its agents are stranded),
//! 3. that auth server heals,
//! 4. a second proxy stops too (agents on both are stranded: no live tunnel),
//! 5. two steps later, both proxies heal (so the outage outlasts the TTL).
//!
//! Then again with the next proxies and auth server.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tracing::info;

use super::cluster::{auth_name, proxy_name, SimCluster};
use lifeline::domain::Kind;

pub async fn run(sim: SimCluster, period: Duration, stop: CancellationToken) {
    let (proxies, auths) = (sim.spec().proxies, sim.spec().auth_servers);
    let mut round = 0usize;
    loop {
        let a = (proxies > 0).then(|| proxy_name(round % proxies));
        let c = (proxies > 1).then(|| proxy_name((round + 1) % proxies));
        let auth = (auths > 0).then(|| auth_name(round % auths));
        let steps: [&str; 5] = [
            "proxy stops heartbeating",
            "auth server NOT_SERVING",
            "auth server heals",
            "second proxy stops heartbeating",
            "proxies heal",
        ];
        for (i, step) in steps.iter().enumerate() {
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
