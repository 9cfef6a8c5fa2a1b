//! What the model keeps per resource: a heartbeating resource as last
//! seen, an auth server with its health, an agent with its classification
//! and open episode, a tunnel, and an agent's own stream.

use std::time::Duration;

use tracing::debug;

use crate::clock::Ts;
use crate::domain::{
    AgentState, Cause, CauseKind, Health, HealthMode, HistoryEvent, Reasons, Server, Tunnel,
};
use crate::telemetry::propagate::TraceRef;

/// Tunables of the rules.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// UNKNOWN longer than this makes an auth server's agents `auth_unhealthy`.
    pub unknown_grace: Duration,
    /// History rows held while SQLite is behind.
    pub max_pending_events: usize,
}

/// What one PUT did: (event name, liveness flipped or new, now expired).
type Observed = (HistoryEvent, bool, bool);

/// A heartbeating resource as last seen.
#[derive(Clone, Debug)]
pub struct ResEntry {
    pub server: Server,
    pub expired: bool,
    /// Heartbeats seen since Lifeline first saw it.
    pub heartbeats: u64,
    pub first_seen: Ts,
}

impl ResEntry {
    pub(crate) fn new(server: Server, now: Ts) -> Self {
        ResEntry {
            expired: server.expires <= now,
            server,
            heartbeats: 0,
            first_seen: now,
        }
    }

    /// A first PUT: the entry, and ("added", new, expired).
    pub(crate) fn added(server: Server, now: Ts) -> (ResEntry, Observed) {
        let e = ResEntry::new(server, now);
        let expired = e.expired;
        (e, (HistoryEvent::Added, true, expired))
    }

    /// A PUT to a known resource: (event, liveness flipped, expired).
    pub(crate) fn observe(&mut self, server: Server, now: Ts) -> Observed {
        let (hb, flipped) = self.update(server, now);
        self.outcome(hb, flipped)
    }

    /// A heartbeat that moved only the expiry and TTL: the server is
    /// updated in place.
    pub(crate) fn observe_expiry(&mut self, expires: Ts, ttl: Duration, now: Ts) -> Observed {
        let (hb, flipped) = self.beat(expires, now);
        self.server.expires = expires;
        self.server.ttl = ttl;
        self.outcome(hb, flipped)
    }

    fn outcome(&self, heartbeat: bool, flipped: bool) -> Observed {
        let event = if heartbeat {
            HistoryEvent::Heartbeat
        } else {
            HistoryEvent::Update
        };
        (event, flipped, self.expired)
    }

    /// Returns (heartbeat, liveness flipped).
    pub(crate) fn update(&mut self, server: Server, now: Ts) -> (bool, bool) {
        let r = self.beat(server.expires, now);
        self.server = server;
        r
    }

    /// The liveness and heartbeat count for a new `expires`: (heartbeat,
    /// liveness flipped).
    fn beat(&mut self, expires: Ts, now: Ts) -> (bool, bool) {
        let heartbeat = expires != self.server.expires;
        if expires < self.server.expires {
            let s = &self.server;
            debug!(kind = %s.kind, name = %s.name, "expiry moved backwards; accepted");
        }
        let expired = expires <= now;
        let flipped = expired != self.expired;
        self.expired = expired;
        if heartbeat {
            self.heartbeats += 1;
        }
        (heartbeat, flipped)
    }
}

#[derive(Clone, Debug)]
pub struct AuthEntry {
    /// From the cluster's `auth_server` resources.
    pub resource: Option<ResEntry>,
    /// From static configuration.
    pub static_addr: Option<String>,
    pub health: Health,
    pub health_since: Ts,
    pub mode: HealthMode,
    pub detail: String,
    /// NOT_SERVING, UNKNOWN past the grace, or (on heartbeat evidence)
    /// its heartbeat expired: its agents are stranded.
    pub unhealthy: bool,
}

impl AuthEntry {
    pub(crate) fn new(now: Ts) -> Self {
        AuthEntry {
            resource: None,
            static_addr: None,
            // Until a health call succeeds, only the heartbeat can strand.
            health: Health::NeverReached,
            health_since: now,
            mode: HealthMode::Watch,
            detail: "not reached yet".into(),
            unhealthy: false,
        }
    }

    pub fn addr(&self) -> &str {
        self.static_addr
            .as_deref()
            .or(self.resource.as_ref().map(|r| r.server.addr.as_str()))
            .unwrap_or("")
    }

    /// True when its health service gives no evidence (not served, never
    /// reached): its own heartbeat decides.
    pub fn on_heartbeat(&self) -> bool {
        matches!(self.health, Health::NotServed | Health::NeverReached)
    }

    /// What its state rests on (`AuthView::evidence`).
    pub fn evidence(&self) -> &'static str {
        match (self.on_heartbeat(), self.mode) {
            (true, _) => "heartbeat",
            (false, HealthMode::Watch) => "health_watch",
            (false, HealthMode::Poll) => "health_poll",
        }
    }

    /// True when its own heartbeat has expired.
    pub fn heartbeat_expired(&self) -> bool {
        self.resource.as_ref().is_some_and(|r| r.expired)
    }

    /// When the unhealthy condition began, and its cause.
    pub fn unhealthy_cause(&self, grace: Duration) -> Option<(CauseKind, Ts)> {
        if !self.unhealthy {
            return None;
        }
        Some(match self.health {
            Health::NotServing => (CauseKind::AuthNotServing, self.health_since),
            Health::NotServed | Health::NeverReached => (
                CauseKind::AuthExpired,
                self.resource
                    .as_ref()
                    .map_or(self.health_since, |r| r.server.expires),
            ),
            _ => (
                CauseKind::AuthUnknown,
                self.health_since.saturating_add(grace),
            ),
        })
    }
}

#[derive(Clone, Debug)]
pub struct AgentEntry {
    pub res: ResEntry,
    pub state: AgentState,
    pub reasons: Reasons,
    pub since: Ts,
    pub cause: Option<Cause>,
    pub episode: Option<i64>,
    /// The last audited signal sent to it, and when: an episode that ends
    /// after it is recorded as ended by that signal.
    pub last_signal: Option<(i64, Ts)>,
    /// The failure trace of the open episode (while exporting traces).
    pub trace: Option<TraceRef>,
}

/// An agent's own stream to Lifeline (`AgentSignals.Connect`).
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Link {
    pub since: Ts,
    pub version: String,
    pub desired_tunnels: u32,
    /// The auth server the agent last reported.
    pub auth_server: String,
    pub reports: u64,
    /// How the peer acts on its agent: `None` for an agent that holds its
    /// own tunnels; a restart-only peer (a sidecar beside a Teleport
    /// agent) restarts it gracefully instead.
    pub restart: Option<Restarter>,
    /// What a sidecar last read of its agent.
    pub report: Option<PeerReport>,
}

/// A restart-only peer, as its Hello describes it.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Restarter {
    /// How it restarts the agent ("systemd reload teleport.service").
    pub method: String,
    /// It only says what it would do.
    pub dry_run: bool,
}

/// A sidecar's account of the agent beside it.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct PeerReport {
    /// The agent's own readiness (Teleport's `/readyz` status), or why it
    /// could not be read.
    pub status: String,
    /// The agent's process, when known.
    pub pid: Option<u32>,
    /// The last restart the sidecar carried out.
    pub last_restart: Option<Ts>,
    /// How long that restart took to report ready, in milliseconds.
    pub last_restart_ready_ms: Option<u64>,
    /// When the report arrived.
    pub at: Ts,
}

impl AgentEntry {
    /// A newly seen agent: healthy until classified.
    pub(crate) fn new(res: ResEntry, now: Ts) -> Self {
        AgentEntry {
            res,
            state: AgentState::Healthy,
            reasons: Reasons::default(),
            since: now,
            cause: None,
            episode: None,
            last_signal: None,
            trace: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TunnelEntry {
    pub tunnel: Tunnel,
    pub expired: bool,
}

impl super::by_name::Named for AgentEntry {
    fn name(&self) -> &str {
        &self.res.server.name
    }
}

impl super::by_name::Named for TunnelEntry {
    fn name(&self) -> &str {
        &self.tunnel.name
    }
}
