//! What a simulated agent does when told: opens and closes tunnels, moves
//! off a proxy, restarts as a sidecar would have it, and checks itself.

use super::*;

impl SimAgent {
    async fn open_tunnel(&self, cluster: &Option<SimCluster>, proxy: &str) {
        if let Some(c) = cluster {
            let now = c.clock().now();
            c.put_tunnel(pb::TunnelConnection {
                name: format!("{}.{proxy}", self.name),
                agent: self.name.clone(),
                proxy: proxy.to_string(),
                last_heartbeat: Some(wire::timestamp(now)),
                expires: None,
            })
            .await;
        }
        lock(&self.shared).tunnels.insert(proxy.to_string());
        self.record(AgentEvent::Opened(proxy.to_string()));
    }

    async fn close_tunnel(&self, cluster: &Option<SimCluster>, proxy: &str) {
        if let Some(c) = cluster {
            c.delete_tunnel(&format!("{}.{proxy}", self.name)).await;
        }
        lock(&self.shared).tunnels.remove(proxy);
        self.record(AgentEvent::Closed(proxy.to_string()));
    }

    /// A live proxy the agent is not on (nor leaving), the one with the
    /// most time left.
    fn pick_target(&self, leaving: &str) -> Option<String> {
        let s = lock(&self.shared);
        let now = Instant::now();
        s.known
            .iter()
            .filter(|(p, until)| **until > now && !s.tunnels.contains(*p) && p.as_str() != leaving)
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(p, _)| p.clone())
    }

    /// The tunnel to give up when none is named: the least healthy one.
    fn least_healthy(&self) -> Option<String> {
        let s = lock(&self.shared);
        let now = Instant::now();
        // An unknown proxy counts as expired now.
        s.tunnels
            .iter()
            .min_by_key(|p| s.known.get(*p).copied().unwrap_or(now))
            .cloned()
    }

    /// Open first, then close: never a moment with fewer tunnels.
    /// What the agent reports: its tunnels, or, for a sidecar (whose
    /// Teleport agent reports none), the agent's readiness.
    pub(super) fn report_for(&self, opts: &AgentOptions) -> pb::AgentMessage {
        match opts.sidecar {
            Some(_) => pb::AgentMessage::report(pb::AgentReport {
                status: "ok".into(),
                ..pb::AgentReport::default()
            }),
            None => self.report_msg(),
        }
    }

    /// A graceful restart, as a Teleport agent's looks from outside: after
    /// `took`, tunnels to live proxies (the old ones closed), attached to a
    /// serving auth server, and a heartbeat at once.
    async fn restart(
        &self,
        cluster: &Option<SimCluster>,
        took: Duration,
        want: u32,
    ) -> (bool, String) {
        tokio::time::sleep(took).await;
        let Some(c) = cluster else {
            return (false, "no cluster to restart in".into());
        };
        let (live, auth) = c.live_for_restart().await;
        let Some(auth) = auth else {
            return (false, "restarted, but no auth server serves".into());
        };
        if live.is_empty() {
            return (false, "restarted, but no proxy is alive".into());
        }
        let pick: Vec<String> = live.into_iter().take(want.max(1) as usize).collect();
        let old: Vec<String> = lock(&self.shared).tunnels.iter().cloned().collect();
        for p in pick.iter().filter(|p| !old.contains(p)) {
            self.open_tunnel(cluster, p).await;
        }
        for p in old.iter().filter(|p| !pick.contains(p)) {
            self.close_tunnel(cluster, p).await;
        }
        if self.auth() != auth {
            c.set_agent_auth(&self.name, &auth).await;
            lock(&self.shared).auth = auth;
        }
        c.heartbeat(lifeline::domain::Kind::Agent, &self.name).await;
        (
            true,
            format!(
                "restarted (simulated): tunnels to {}; ready after {:.1} s",
                pick.join(", "),
                took.as_secs_f64()
            ),
        )
    }

    async fn move_off(&self, cluster: &Option<SimCluster>, from: &str) -> Result<String, String> {
        let target = self
            .pick_target(from)
            .ok_or_else(|| "no live proxy to move to".to_string())?;
        self.open_tunnel(cluster, &target).await;
        if lock(&self.shared).tunnels.contains(from) {
            self.close_tunnel(cluster, from).await;
        }
        Ok(target)
    }

    pub(super) async fn on_signal(
        &self,
        s: pb::Signal,
        opts: &AgentOptions,
        cluster: &Option<SimCluster>,
        out: &mpsc::Sender<pb::AgentMessage>,
    ) {
        let mut span = continue_trace(&s, &self.name);
        let (ok, detail) = match s.kind {
            Some(pb::signal::Kind::Discovery(d)) => {
                let now = Instant::now();
                let list: Vec<(String, Duration)> = d
                    .proxies
                    .iter()
                    .map(|p| {
                        let ttl = p
                            .ttl
                            .as_ref()
                            .map(lifeline::proto::std_duration)
                            .unwrap_or_default();
                        (p.name.clone(), ttl)
                    })
                    .collect();
                {
                    let mut sh = lock(&self.shared);
                    if d.full && !opts.legacy {
                        sh.known.clear();
                    }
                    for (name, ttl) in &list {
                        let keep = if opts.legacy { LEGACY_EXPIRY } else { *ttl };
                        sh.known.insert(name.clone(), now + keep);
                    }
                }
                self.record(AgentEvent::Discovery {
                    full: d.full,
                    proxies: list,
                });
                return;
            }
            Some(pb::signal::Kind::Reconnect(_)) if opts.sidecar.is_some() => {
                let took = opts.sidecar.unwrap_or_default();
                self.restart(cluster, took, opts.desired_tunnels).await
            }
            Some(pb::signal::Kind::CloseTunnel(_)) if opts.sidecar.is_some() => {
                (false, "a sidecar closes no single tunnel".to_string())
            }
            Some(pb::signal::Kind::Reconnect(r)) => {
                let from = if r.proxy.is_empty() {
                    self.least_healthy().unwrap_or_default()
                } else {
                    r.proxy.clone()
                };
                if !lock(&self.shared).tunnels.contains(&from) {
                    // Already moved (the signal crossed the move): done.
                    (true, format!("not on {from}; nothing to move"))
                } else {
                    match self.move_off(cluster, &from).await {
                        Ok(to) => (true, format!("moved {from} → {to}")),
                        Err(e) => (false, e),
                    }
                }
            }
            Some(pb::signal::Kind::CloseTunnel(c)) => {
                let n = lock(&self.shared).tunnels.len();
                if !lock(&self.shared).tunnels.contains(&c.proxy) {
                    (false, format!("no tunnel to {}", c.proxy))
                } else if n <= 1 {
                    (false, "refused: it is my last tunnel".to_string())
                } else {
                    self.close_tunnel(cluster, &c.proxy).await;
                    (true, format!("closed {}", c.proxy))
                }
            }
            None => return,
        };
        if let Some(span) = span.as_mut() {
            use opentelemetry::trace::Span as _;
            span.set_attribute(opentelemetry::KeyValue::new("ok", ok));
            span.set_attribute(opentelemetry::KeyValue::new("detail", detail.clone()));
            span.end();
        }
        let _ = out.send(self.report_for(opts)).await;
        let _ = out.send(pb::AgentMessage::ack(s.id, ok, detail)).await;
        self.record(AgentEvent::Acked { id: s.id, ok });
    }

    /// Moves tunnels off proxies whose expiry (as the agent knows it) passed.
    pub(super) async fn check(
        &self,
        cluster: &Option<SimCluster>,
        out: &mpsc::Sender<pb::AgentMessage>,
    ) {
        let stale: Vec<String> = {
            let s = lock(&self.shared);
            if s.known.is_empty() {
                return;
            }
            let now = Instant::now();
            s.tunnels
                .iter()
                .filter(|p| s.known.get(*p).is_none_or(|until| *until <= now))
                .cloned()
                .collect()
        };
        let mut moved = false;
        for p in stale {
            if self.move_off(cluster, &p).await.is_ok() {
                moved = true;
            }
        }
        if moved {
            let _ = out.send(self.report_msg()).await;
        }
    }
}
