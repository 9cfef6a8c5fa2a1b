//! Domain types shared by every room: resource kinds, validated servers and
//! tunnels, auth health, agent states and reasons. Plain data; no I/O.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Ts;

mod change;
mod cluster;
mod history;
pub mod incident;
mod kept;
mod labels;
mod lb_policy;
pub mod maintenance;
mod notice;
mod record;
mod setting;
mod signal;
pub mod text;

pub use change::{Change, Op, RejectCode, Rejection, MAX_NAME_LEN};
pub use cluster::ClusterName;
pub use history::{EndReason, HistoryEvent, Subject};
pub use incident::{Incident, Severity};
pub use kept::{Episode, LastHealth, Loaded};
pub use labels::{LabelText, Labels};
pub use lb_policy::{LbMode, LbPolicy, PolicyError};
pub use maintenance::{Handling, Plan, Planned, Target, TargetError, TargetKind, Window, Windows};
pub use notice::{
    About, IncidentMark, Notice, NoticeError, NoticeKind, NoticeSubject, PauseNotice,
};
pub use record::{
    Attribution, Census, EpisodeChange, HealthTransition, HistoryEntry, IncidentMove,
    IncidentRecord, Record, ResourceChange, MAX_PENDING_EPISODES, MAX_PENDING_HEALTH,
};
pub use setting::{Origin, SettingAction};
pub use signal::{Outcome, SignalKind};

/// Declares a unit enum whose values have one name each at every edge, all
/// from one case rule: serde (JSON, TOML), strum (`as_str`, `FromStr`,
/// [`names`] through `VariantArray`) and sqlx (SQLite TEXT).
macro_rules! named_enum {
    ($case:literal; $(#[$meta:meta])* $vis:vis enum $name:ident { $($body:tt)* }) => {
        $(#[$meta])*
        #[derive(
            Clone,
            Copy,
            Debug,
            PartialEq,
            Eq,
            Hash,
            PartialOrd,
            Ord,
            serde::Serialize,
            serde::Deserialize,
            sqlx::Type,
            strum::IntoStaticStr,
            strum::EnumString,
            strum::VariantArray,
        )]
        #[serde(rename_all = $case)]
        #[strum(serialize_all = $case)]
        // Stored as text by every engine (PostgreSQL would otherwise look
        // for an enum type of its own).
        #[sqlx(rename_all = $case, type_name = "text")]
        $vis enum $name { $($body)* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = <$name as strum::VariantArray>::VARIANTS;

            /// This value's one name.
            pub fn as_str(self) -> &'static str {
                self.into()
            }
        }

        /// On the wire: one of its names (the API's contract).
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some($name::ALL.iter().map(|v| v.as_str())))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}
pub(crate) use named_enum;

/// Every name of an enum whose names `strum` derives, in declaration order
/// (for error messages and a filter's choices).
pub fn names<E>() -> Vec<&'static str>
where
    E: strum::VariantArray + Copy + Into<&'static str>,
{
    E::VARIANTS.iter().map(|&v| v.into()).collect()
}

/// A kind of resource Lifeline watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, utoipa::ToSchema)]
#[strum(serialize_all = "snake_case")]
pub enum Kind {
    Proxy,
    AuthServer,
    Agent,
    TunnelConnection,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::Proxy,
        Kind::AuthServer,
        Kind::Agent,
        Kind::TunnelConnection,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Kinds that a `Server` message may carry.
    pub fn is_server(self) -> bool {
        !matches!(self, Kind::TunnelConnection)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown kind {0:?} (expected proxy, auth_server, agent or tunnel_connection)")]
pub struct UnknownKind(pub String);

impl FromStr for Kind {
    type Err = UnknownKind;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKind(s.to_string()))
    }
}

/// Labels Lifeline itself puts on an agent it folds from a Teleport host's
/// services, read back by the dashboard.
pub mod agent_label {
    /// The services the host runs (`app_server,node`).
    pub const SERVICES: &str = "teleport.dev/services";
    /// The host's hostname, from its latest service.
    pub const HOSTNAME: &str = "teleport.dev/hostname";
    /// Whether the agent's tunnels were observed or assumed.
    pub const TUNNELS: &str = "lifeline.dev/tunnels";
    /// Tunnels from `ProxyIDs` (proxy peering).
    pub const TUNNELS_OBSERVED: &str = "observed";
    /// No `ProxyIDs` (agent mesh): one tunnel to every known proxy, assumed.
    pub const TUNNELS_ASSUMED: &str = "assumed";
}

/// A validated heartbeating server (proxy, auth server or agent).
#[derive(Clone, Debug, PartialEq)]
pub struct Server {
    pub kind: Kind,
    pub name: String,
    pub addr: String,
    pub version: String,
    pub group_id: String,
    pub group_generation: u64,
    pub expires: Ts,
    /// The announce TTL (the kind's default when the source sent none).
    pub ttl: Duration,
    /// Shared: a source that repeats a server's labels on every heartbeat
    /// hands over the same map.
    pub labels: Labels,
    /// For agents: the auth server they are attached to.
    pub auth_server: String,
}

impl Server {
    /// The moment of the heartbeat that set `expires` (`expires - ttl`).
    pub fn last_heartbeat(&self) -> Ts {
        self.expires.saturating_sub(self.ttl)
    }

    /// True when `other` differs from this server in its expiry and TTL at
    /// most: a plain heartbeat.
    pub fn same_but_expiry(&self, other: &Server) -> bool {
        // Every field named, so that a new one is not forgotten here.
        let Server {
            kind,
            name,
            addr,
            version,
            group_id,
            group_generation,
            expires: _,
            ttl: _,
            labels,
            auth_server,
        } = self;
        *kind == other.kind
            && *name == other.name
            && *addr == other.addr
            && *version == other.version
            && *group_id == other.group_id
            && *group_generation == other.group_generation
            && *labels == other.labels
            && *auth_server == other.auth_server
    }
}

/// A validated reverse tunnel from an agent to a proxy.
#[derive(Clone, Debug, PartialEq)]
pub struct Tunnel {
    pub name: String,
    pub agent: String,
    pub proxy: String,
    pub last_heartbeat: Option<Ts>,
    /// `None`: lives until deleted.
    pub expires: Option<Ts>,
}

/// The server name Teleport's Auth certificates carry (SNI and verified).
pub const TELEPORT_SERVER_NAME: &str = "teleport.cluster.local";

named_enum! {
    "snake_case";
    /// A Teleport agent service: the kinds one host heartbeats, each with its
    /// own resource and expiry. Lifeline's `agent` is the host (its host ID)
    /// running one or more of them.
    pub enum AgentService {
        Node,
        AppServer,
        DbServer,
        KubeServer,
        WindowsDesktopService,
    }
}

named_enum! {
    "SCREAMING_SNAKE_CASE";
    /// An auth server's health, normalised from grpc.health.v1.
    pub enum Health {
        Serving,
        NotServing,
        /// No answer: stream broken, not connected yet, or the server said UNKNOWN.
        Unknown,
        /// The server does not know the watched service (NOT_FOUND / SERVICE_UNKNOWN).
        ServiceUnknown,
        /// The server does not serve `grpc.health.v1` at all (UNIMPLEMENTED
        /// on `Watch` and `Check`: Teleport before January 2026). Never
        /// strands by itself: the auth server's own heartbeat is the evidence.
        NotServed,
        /// No health call has succeeded since Lifeline started (say, an auth
        /// server reachable only through a proxy that routes to a random
        /// one). Never strands by itself: the heartbeat is the evidence.
        NeverReached,
    }
}

impl Health {
    pub fn parse(s: &str) -> Option<Health> {
        s.parse().ok()
    }
}

named_enum! {
    "snake_case";
    /// How Lifeline learns an auth server's health.
    pub enum HealthMode {
        /// A `Watch` stream (the normal case).
        Watch,
        /// The server answered `Watch` with UNIMPLEMENTED; Lifeline polls `Check`.
        Poll,
    }
}

named_enum! {
    "snake_case";
    pub enum AgentState {
        Healthy,
        Degraded,
        Stranded,
    }
}

impl AgentState {
    pub fn parse(s: &str) -> Option<AgentState> {
        s.parse().ok()
    }
}

named_enum! {
    "snake_case";
    /// How every surface counts an agent: the four partition the fleet
    /// (each agent is in exactly one). A *planned* agent is one whose
    /// degradation or stranding a maintenance window or a rollout explains:
    /// it is in no degraded or stranded figure and in no agent-minutes
    /// stranded, it is not acted on, and it is not notified.
    pub enum Standing {
        Healthy,
        Degraded,
        Stranded,
        Planned,
    }
}

impl Standing {
    /// The one rule: the classifier's state, unless a plan explains it.
    pub fn of(state: AgentState, cause: Option<&Cause>) -> Standing {
        match state {
            AgentState::Healthy => Standing::Healthy,
            _ if cause.is_some_and(|c| c.planned.is_some()) => Standing::Planned,
            AgentState::Degraded => Standing::Degraded,
            AgentState::Stranded => Standing::Stranded,
        }
    }
}

named_enum! {
    "snake_case";
    /// Why an agent is not healthy. The first three strand it; the last degrades it.
    pub enum Reason {
        AuthUnhealthy,
        NoLiveTunnel,
        AgentExpired,
        TunnelToExpiredProxy,
    }
}

impl Reason {
    pub fn parse(s: &str) -> Option<Reason> {
        s.parse().ok()
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A small set of reasons (a bit set; ordered iteration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reasons(u8);

impl Reasons {
    pub fn insert(&mut self, r: Reason) {
        self.0 |= r.bit();
    }
    pub fn contains(self, r: Reason) -> bool {
        self.0 & r.bit() != 0
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn iter(self) -> impl Iterator<Item = Reason> {
        Reason::ALL
            .iter()
            .copied()
            .filter(move |r| self.contains(*r))
    }
    /// Comma-separated names, as stored in SQLite.
    pub fn join(self) -> String {
        self.iter()
            .map(Reason::as_str)
            .collect::<Vec<_>>()
            .join(",")
    }
    pub fn parse_joined(s: &str) -> Reasons {
        let mut out = Reasons::default();
        for r in s.split(',').filter_map(Reason::parse) {
            out.insert(r);
        }
        out
    }
}

impl Serialize for Reasons {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// On the wire: the reasons' names, in order.
impl utoipa::PartialSchema for Reasons {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ArrayBuilder::new()
            .items(<Reason as utoipa::PartialSchema>::schema())
            .into()
    }
}

impl utoipa::ToSchema for Reasons {}

named_enum! {
    "snake_case";
    /// What stranded (or degraded) an agent: the root cause that groups agents on
    /// the dashboard ("38 agents: proxy-2 expired").
    pub enum CauseKind {
        /// Its auth server is NOT_SERVING.
        AuthNotServing,
        /// Its auth server's health has been unknown for longer than the grace.
        AuthUnknown,
        /// Its auth server's own heartbeat expired, and its health service
        /// is not served or was never reached: the heartbeat is the evidence.
        AuthExpired,
        /// The last live proxy among its tunnels expired.
        ProxyExpired,
        /// Its tunnels point at proxies Lifeline does not know (deleted).
        ProxyMissing,
        /// Its last live proxy left by its own delete (Teleport's graceful
        /// shutdown): a departure, planned by the cluster's own account.
        ProxyDeparted,
        /// Its tunnel records themselves expired.
        TunnelExpired,
        /// It has no tunnels at all.
        NoTunnels,
        /// Its own heartbeat expired; grouped by its auth server.
        AgentExpired,
    }
}

impl CauseKind {
    pub fn parse(s: &str) -> Option<CauseKind> {
        s.parse().ok()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub kind: CauseKind,
    /// The resource behind the cause (proxy or auth server name; may be empty).
    pub resource: String,
    /// Why it is planned, when it is: shown, not acted on, not notified.
    pub planned: Option<Plan>,
}

/// A minimal server for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) fn test_server(kind: Kind, name: &str, expires: Ts) -> Server {
    Server {
        kind,
        name: name.into(),
        addr: String::new(),
        version: String::new(),
        group_id: String::new(),
        group_generation: 0,
        expires,
        ttl: Duration::from_secs(1),
        labels: Labels::default(),
        auth_server: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_print() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>().ok(), Some(k));
        }
        let err = "node".parse::<Kind>().unwrap_err();
        assert!(err.to_string().contains("\"node\""));
    }

    #[test]
    fn reasons_round_trip_through_storage_form() {
        let mut r = Reasons::default();
        r.insert(Reason::NoLiveTunnel);
        r.insert(Reason::AuthUnhealthy);
        assert_eq!(r.join(), "auth_unhealthy,no_live_tunnel");
        assert_eq!(Reasons::parse_joined(&r.join()), r);
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"["auth_unhealthy","no_live_tunnel"]"#
        );
    }
}
