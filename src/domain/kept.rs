//! What the store kept and hands back, in the model's words: an episode
//! as it was recorded, each auth server's last known health, and all that
//! Lifeline knew when it last stopped ([`Loaded`]). Plain data.

use serde::Serialize;

use crate::clock::Ts;
use crate::domain::{AgentState, CauseKind, EndReason, Health, IncidentRecord, Server, Tunnel};

/// One degraded or stranded period of an agent.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Episode {
    pub id: i64,
    /// The cluster of its agent.
    #[schema(value_type = String, example = "default")]
    pub cluster: super::ClusterName,
    pub agent: String,
    pub state: AgentState,
    pub reasons: Vec<String>,
    /// The root cause's kind (a `CauseKind` name); `""` when there is
    /// none (as stored).
    #[serde(serialize_with = "cause_or_empty")]
    #[schema(value_type = String)]
    pub cause: Option<CauseKind>,
    pub cause_resource: String,
    pub started_at: Ts,
    pub ended_at: Option<Ts>,
    pub ended_by_signal: Option<i64>,
    pub end_reason: Option<EndReason>,
    /// The incident of its (latest) cause.
    pub incident: Option<i64>,
}

fn cause_or_empty<S: serde::Serializer>(c: &Option<CauseKind>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.map_or("", CauseKind::as_str))
}

/// The last known auth health, from the newest transition of each server.
#[derive(Clone, Debug)]
pub struct LastHealth {
    pub auth_server: String,
    pub addr: String,
    pub health: Health,
    pub since: Ts,
}

/// What Lifeline knew when it last stopped.
#[derive(Debug, Default)]
pub struct Loaded {
    pub servers: Vec<Server>,
    pub tunnels: Vec<Tunnel>,
    pub open_episodes: Vec<Episode>,
    pub next_episode_id: i64,
    pub open_incidents: Vec<IncidentRecord>,
    pub next_incident_id: i64,
    pub health: Vec<LastHealth>,
}
