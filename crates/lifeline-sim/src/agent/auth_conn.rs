//! A simulated agent's auth connection under `teleport_pick_healthy`: the
//! policy asked of Lifeline, its auth server's health watched, and in
//! reconnect mode a backup connection opened, switched to once healthy,
//! or dropped if the old server recovers first.

use std::time::Duration;

use rand::SeedableRng;
use tonic::transport::{Channel, Endpoint};
use tracing::info;

use super::{lock, AgentEvent, AgentOptions, SimAgent};
use crate::cluster::SimCluster;
use crate::wire;
use lifeline::proto::health::health_check_response::ServingStatus;
use lifeline::proto::health::health_client::HealthClient;
use lifeline::proto::health::HealthCheckRequest;
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::service_config_discovery_service_client::ServiceConfigDiscoveryServiceClient;

/// Agents whose health watches share one HTTP/2 connection to an auth
/// server (well under a server's concurrent-stream limit): a simulated
/// fleet of ten thousand holds a hundred connections, not ten thousand
/// descriptors on each side of one process.
const AGENTS_PER_AUTH_CONNECTION: u64 = 100;
/// Connections remembered before the cache starts afresh.
const MAX_CACHED: usize = 10_000;

/// The connection to `addr` that the agent seeded `seed` shares with its
/// neighbours (agents' seeds are consecutive).
fn shared_channel(addr: &str, seed: u64) -> Option<Channel> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static CHANNELS: OnceLock<Mutex<HashMap<(String, u64), Channel>>> = OnceLock::new();
    let key = (addr.to_string(), seed / AGENTS_PER_AUTH_CONNECTION);
    let mut m = CHANNELS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(c) = m.get(&key) {
        return Some(c.clone());
    }
    if m.len() >= MAX_CACHED {
        m.clear();
    }
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_lazy();
    m.insert(key, channel.clone());
    Some(channel)
}

impl SimAgent {
    /// `teleport_pick_healthy` for the auth connection.
    pub(super) async fn auth_loop(
        self,
        opts: AgentOptions,
        lifeline: Channel,
        cluster: SimCluster,
    ) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(opts.seed ^ 0x5eed);
        let policy = ServiceConfigDiscoveryServiceClient::new(lifeline)
            .get_service_config(pb::GetServiceConfigRequest {})
            .await;
        let (reconnect, service) = match policy {
            Ok(r) => wire::reconnect_policy(&r.into_inner()),
            // Per RFD 0226: treat the connection as healthy, no checking.
            Err(_) => (false, String::new()),
        };
        if !reconnect {
            return;
        }
        let addr_of = |name: &str| {
            cluster
                .auth_servers()
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, a)| a)
        };
        'outer: loop {
            let current = self.auth();
            let Some(addr) = addr_of(&current) else {
                return;
            };
            let Some(channel) = shared_channel(&addr.to_string(), opts.seed) else {
                return;
            };
            let mut health = HealthClient::new(channel);
            let watch = tokio::select! {
                _ = self.stop.cancelled() => return,
                w = health.watch(HealthCheckRequest { service: service.clone() }) => w,
            };
            let mut stream = match watch {
                Ok(w) => w.into_inner(),
                Err(_) => {
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(wire::backoff(opts.backoff_base, opts.backoff_cap, 0, &mut rng)) => {}
                    }
                    continue;
                }
            };
            loop {
                let m = tokio::select! {
                    _ = self.stop.cancelled() => return,
                    m = stream.message() => m,
                };
                let status = match m {
                    Ok(Some(r)) => r.status,
                    _ => continue 'outer,
                };
                if status != ServingStatus::NotServing as i32 {
                    continue;
                }
                // NOT_SERVING: look for a backup, with backoff, unless the
                // current server recovers first.
                let mut attempt = 0u32;
                loop {
                    let d = wire::backoff(opts.backoff_base, opts.backoff_cap, attempt, &mut rng);
                    attempt = attempt.saturating_add(1);
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        m = stream.message() => match m {
                            Ok(Some(r)) if r.status == ServingStatus::Serving as i32 => {
                                self.record(AgentEvent::BackupDropped(current.clone()));
                                break;
                            }
                            Ok(Some(_)) => {}
                            _ => continue 'outer,
                        },
                        _ = tokio::time::sleep(d) => {
                            if let Some(to) = self.try_backup(&cluster, &current, &service).await {
                                info!(agent = %self.name, from = %current, %to, "sim agent moved its auth connection");
                                lock(&self.shared).auth = to.clone();
                                cluster.set_agent_auth(&self.name, &to).await;
                                self.record(AgentEvent::AuthSwitched { from: current.clone(), to });
                                self.report.notify_one();
                                // The old connection is not closed: streams
                                // open on it finish on their own.
                                continue 'outer;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Connects to another auth server and returns it once it is SERVING.
    async fn try_backup(
        &self,
        cluster: &SimCluster,
        current: &str,
        service: &str,
    ) -> Option<String> {
        for (name, addr) in cluster.auth_servers() {
            if name == current {
                continue;
            }
            let Ok(ep) = Endpoint::from_shared(format!("http://{addr}")) else {
                continue;
            };
            let Ok(ch) = ep.connect_timeout(Duration::from_secs(2)).connect().await else {
                continue;
            };
            let ok = HealthClient::new(ch)
                .check(HealthCheckRequest {
                    service: service.to_string(),
                })
                .await
                .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32);
            if ok {
                return Some(name);
            }
        }
        None
    }
}
