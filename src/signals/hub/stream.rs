//! One agent's `AgentSignals.Connect` stream: the Hello that names it
//! (checked against its join grant), its reports and acks in, discovery
//! and signals out. A stuck agent's stream only stops pulling.

use super::*;

/// The gRPC front of the hub.
pub struct Service {
    pub(super) hub: Arc<Hub>,
}

type SignalStream = Pin<Box<dyn Stream<Item = Result<pb::Signal, Status>> + Send>>;

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_NAME && text::name_problem(s).is_none()
}

#[tonic::async_trait]
impl AgentSignals for Service {
    type ConnectStream = SignalStream;

    async fn connect(
        &self,
        req: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<SignalStream>, Status> {
        let hub = self.hub.clone();
        let grant = req.extensions().get::<AgentGrant>().cloned();
        let peer = req
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.to_string());
        let mut inbound = req.into_inner();
        let first = tokio::time::timeout(hub.cfg.hello_timeout, inbound.message())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!("no Hello within {:?}", hub.cfg.hello_timeout))
            })??;
        let hello = match first.and_then(|m| m.msg) {
            Some(pb::agent_message::Msg::Hello(h)) => h,
            _ => {
                Stats::inc(&hub.rt.stats.agent_messages_rejected);
                return Err(Status::invalid_argument(
                    "the first message on a Connect stream must be Hello",
                ));
            }
        };
        if !valid_name(&hello.agent) {
            Stats::inc(&hub.rt.stats.agent_messages_rejected);
            return Err(Status::invalid_argument(format!(
                "Hello.agent must be 1..={MAX_NAME} printable characters"
            )));
        }
        let agent = hello.agent.clone();
        // The cluster is the one it names (none: the one watched here),
        // and must be this hub's; the join token may bind it too.
        let here = hub.fleet.cluster();
        let claimed = if hello.cluster.is_empty() {
            here.as_str()
        } else {
            hello.cluster.as_str()
        };
        if claimed != here.as_str() {
            Stats::inc(&hub.rt.stats.agent_join_refused);
            let claimed = text::excerpt(claimed);
            warn!(%peer, agent = %text::excerpt(&agent), cluster = %claimed, "agent signal stream refused: it names another cluster");
            return Err(Status::permission_denied(format!(
                "agent {agent:?} names cluster {claimed:?}; Lifeline watches no cluster of that name here (watched: {here})"
            )));
        }
        if let Some(why) = grant.as_ref().and_then(|g| g.admits_cluster(claimed).err()) {
            Stats::inc(&hub.rt.stats.agent_join_refused);
            warn!(%peer, agent = %text::excerpt(&agent), cluster = %claimed, "agent signal stream refused: {why}");
            return Err(Status::permission_denied(format!(
                "this stream may not speak for agents of cluster {claimed:?}: {why}"
            )));
        }
        // The name is what the stream says; the join token (and the client
        // certificate, when it is the identity) say which names it may.
        if let Some(why) = grant.as_ref().and_then(|g| g.admits(&agent).err()) {
            Stats::inc(&hub.rt.stats.agent_join_refused);
            warn!(%peer, agent = %text::excerpt(&agent), "agent signal stream refused: {why}");
            return Err(Status::permission_denied(format!(
                "this stream may not speak for agent {agent:?}: {why}"
            )));
        }
        let restart = match restarter(hello.capabilities.as_ref()) {
            Ok(r) => r,
            Err(why) => {
                Stats::inc(&hub.rt.stats.agent_messages_rejected);
                return Err(Status::invalid_argument(why));
            }
        };
        let restart_only = restart.is_some();
        let (tx, rx) = mpsc::channel(hub.cfg.signal_queue.max(1));
        let dry_run = restart.as_ref().is_some_and(|r| r.dry_run);
        let restart_wait = restart_wait_of(hello.capabilities.as_ref());
        let opening = super::streams::Opening {
            tx,
            peer: &peer,
            restart_only,
            dry_run,
            restart_wait,
        };
        let Some(conn) = hub.register(&agent, opening) else {
            Stats::inc(&hub.rt.stats.agent_join_refused);
            return Err(Status::already_exists(format!(
                "agent {agent:?} already holds a signal stream; a second is refused until that one ends"
            )));
        };
        let link = Link {
            since: hub.rt.clock.now(),
            version: text::bounded(&hello.version, 64),
            desired_tunnels: hello.desired_tunnels,
            auth_server: String::new(),
            reports: 0,
            restart,
            report: None,
        };
        if hub
            .fleet
            .send(Command::Link {
                agent: agent.clone(),
                link: Some(link),
            })
            .await
            .is_err()
        {
            hub.unregister(&agent, conn);
            return Err(Status::unavailable("Lifeline is shutting down"));
        }
        debug!(%agent, "agent signal stream open");
        let span = info_span!("signals.agent_stream", %agent);
        tokio::spawn(read_agent(hub.clone(), agent.clone(), conn, inbound).instrument(span));
        Ok(Response::new(Box::pin(outbound(
            hub,
            rx,
            &peer,
            restart_only,
        ))))
    }
}

/// Reads what the agent sends until its stream ends.
async fn read_agent(
    hub: Arc<Hub>,
    agent: String,
    conn: u64,
    mut inbound: Streaming<pb::AgentMessage>,
) {
    loop {
        let msg = tokio::select! {
            _ = hub.rt.shutdown.cancelled() => break,
            m = inbound.message() => m,
        };
        match msg {
            Ok(Some(m)) => match m.msg {
                Some(pb::agent_message::Msg::Tunnels(r)) => {
                    if r.proxies.len() > MAX_REPORTED
                        || !r.proxies.iter().all(|p| valid_name(p))
                        || r.auth_server.len() > MAX_NAME
                        || r.auth_server.chars().any(text::is_unsafe)
                    {
                        Stats::inc(&hub.rt.stats.agent_messages_rejected);
                        warn!(%agent, proxies = r.proxies.len(), "tunnel report refused: bad proxy names or too many");
                        continue;
                    }
                    let mut proxies = r.proxies;
                    proxies.sort();
                    proxies.dedup();
                    let cmd = Command::Report {
                        agent: agent.clone(),
                        proxies,
                        auth_server: r.auth_server,
                    };
                    if hub.fleet.send(cmd).await.is_err() {
                        break;
                    }
                }
                Some(pb::agent_message::Msg::Ack(a)) => hub.ack(&agent, a),
                Some(pb::agent_message::Msg::Report(r)) => {
                    let Some(report) = peer_report(&r, hub.rt.clock.now()) else {
                        Stats::inc(&hub.rt.stats.agent_messages_rejected);
                        warn!(%agent, "agent report refused: its status is not printable text or its times are out of range");
                        continue;
                    };
                    let cmd = Command::PeerReport {
                        agent: agent.clone(),
                        report,
                    };
                    if hub.fleet.send(cmd).await.is_err() {
                        break;
                    }
                }
                Some(pb::agent_message::Msg::Hello(_)) | None => {
                    Stats::inc(&hub.rt.stats.agent_messages_rejected);
                    debug!(%agent, "ignored a second Hello or an empty message");
                }
            },
            Ok(None) => break,
            Err(status) => {
                debug!(%agent, error = %status, "agent stream ended with an error");
                break;
            }
        }
    }
    if hub.unregister(&agent, conn) {
        debug!(%agent, "agent signal stream closed");
        let _ = hub.fleet.send(Command::Link { agent, link: None }).await;
    }
}

/// Longest restart method a Hello may describe.
const MAX_METHOD: usize = 200;
/// Longest agent status a report may carry.
const MAX_STATUS: usize = 200;

/// The longest a sidecar may say its restart takes before the ack.
pub const MAX_RESTART_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a sidecar said its restart may take, at most [`MAX_RESTART_WAIT`]
/// (a huge or hostile figure waits no longer than that); zero when not
/// said or not a sidecar.
fn restart_wait_of(c: Option<&pb::Capabilities>) -> std::time::Duration {
    c.filter(|c| c.restart_only)
        .map_or(std::time::Duration::ZERO, |c| {
            std::time::Duration::from_secs(u64::from(c.restart_wait_seconds)).min(MAX_RESTART_WAIT)
        })
}

/// What a Hello's capabilities say of its peer: `None` for an agent that
/// holds its own tunnels; the error names what is wrong.
fn restarter(c: Option<&pb::Capabilities>) -> Result<Option<Restarter>, String> {
    let Some(c) = c.filter(|c| c.restart_only) else {
        return Ok(None);
    };
    if c.restart_method.len() > MAX_METHOD || c.restart_method.chars().any(text::is_unsafe) {
        return Err(format!(
            "Hello.capabilities.restart_method must be at most {MAX_METHOD} bytes of printable text"
        ));
    }
    Ok(Some(Restarter {
        method: c.restart_method.clone(),
        dry_run: c.dry_run,
    }))
}

/// A sidecar's report, checked: printable status, times within range.
fn peer_report(r: &pb::AgentReport, now: crate::clock::Ts) -> Option<PeerReport> {
    if r.status.chars().any(text::is_unsafe) {
        return None;
    }
    let last_restart = match &r.last_restart {
        Some(t) => Some(crate::proto::timestamp(t)?),
        None => None,
    };
    let last_restart_ready_ms = match &r.last_restart_ready {
        Some(d) if d.seconds < 0 || d.nanos < 0 => return None,
        Some(d) => Some(
            (d.seconds as u64)
                .checked_mul(1000)?
                .checked_add(d.nanos as u64 / 1_000_000)?,
        ),
        None => None,
    };
    Some(PeerReport {
        status: text::bounded(&r.status, MAX_STATUS),
        pid: (r.pid != 0).then_some(r.pid),
        last_restart,
        last_restart_ready_ms,
        at: now,
    })
}

/// What Lifeline sends one agent: a full Discovery first, then deltas as
/// proxies heartbeat, and every queued control signal. A restart-only
/// peer gets the control signals alone: the agent beside it finds its
/// proxies its own way.
fn outbound(
    hub: Arc<Hub>,
    mut rx: mpsc::Receiver<Box<pb::Signal>>,
    peer: &str,
    restart_only: bool,
) -> impl Stream<Item = Result<pb::Signal, Status>> + Send {
    // Woken with the other streams of its connection (see `wakes`).
    let mut versions = hub.wakes.subscribe(peer, hub.board.version());
    async_stream::stream! {
        // Seen before the board is read: a change after the read wakes
        // the stream again.
        versions.borrow_and_update();
        let first = hub.board.full(hub.rt.clock.now());
        let mut sent = first.version;
        if !restart_only {
            yield Ok(hub.discovery(first));
        }
        let mut full_tick = tokio::time::interval_at(
            hub.rt.clock.deadline_in(hub.cfg.full_discovery_interval),
            hub.cfg.full_discovery_interval,
        );
        full_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = hub.rt.shutdown.cancelled() => break,
                s = rx.recv() => match s {
                    Some(s) => {
                        hub.delivered(s.id as i64);
                        yield Ok(*s);
                    }
                    // Replaced by a newer stream of the same agent.
                    None => break,
                },
                changed = versions.changed(), if !restart_only => {
                    if changed.is_err() {
                        break;
                    }
                    let now = hub.rt.clock.now();
                    let p = if hub.settings.full_discovery() {
                        hub.board.full(now)
                    } else {
                        hub.board.delta(sent, now, hub.cfg.max_delta_proxies)
                    };
                    sent = p.version;
                    if p.full || !p.proxies.is_empty() {
                        yield Ok(hub.discovery(p));
                    }
                }
                _ = full_tick.tick() => {
                    if hub.settings.full_discovery() && !restart_only {
                        let p = hub.board.full(hub.rt.clock.now());
                        sent = p.version;
                        yield Ok(hub.discovery(p));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sidecars_restart_wait_is_taken_up_to_an_hour_and_only_from_a_sidecar() {
        let caps = |restart_only, secs| pb::Capabilities {
            restart_only,
            restart_method: "systemd reload teleport.service".into(),
            dry_run: false,
            restart_wait_seconds: secs,
        };
        let s = std::time::Duration::from_secs;
        assert_eq!(restart_wait_of(Some(&caps(true, 330))), s(330));
        assert_eq!(restart_wait_of(Some(&caps(true, 0))), s(0));
        assert_eq!(
            restart_wait_of(Some(&caps(true, u32::MAX))),
            MAX_RESTART_WAIT
        );
        assert_eq!(
            restart_wait_of(Some(&caps(false, 330))),
            s(0),
            "not a sidecar"
        );
        assert_eq!(restart_wait_of(None), s(0));
    }
}
