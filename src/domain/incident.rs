//! An incident as every surface shows it: the API, the dashboard, and
//! the notices told about it. Made from the one record the fleet writes
//! ([`IncidentRecord`]); its words (title, peak, minutes) and its
//! severity are decided here and only rendered elsewhere.

use serde::{Deserialize, Serialize};

use super::{CauseKind, ClusterName, IncidentRecord, Planned};
use crate::clock::Ts;

/// One incident, as the API shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Incident {
    pub id: i64,
    /// The cluster it happened in.
    #[schema(value_type = String, example = "default")]
    #[serde(default)]
    pub cluster: ClusterName,
    /// The root cause's kind (a `CauseKind` name).
    #[schema(value_type = String)]
    pub cause: CauseKind,
    /// The proxy or auth server behind it (`""` for none).
    pub resource: String,
    /// In words: "proxy-1 expired".
    pub title: String,
    pub started: Ts,
    /// `null` while open.
    pub ended: Option<Ts>,
    pub open: bool,
    /// Most agents stranded, degraded, and planned, at once (a planned
    /// incident's agents are all planned; an unplanned one has none).
    pub peak_stranded: u32,
    pub peak_degraded: u32,
    pub peak_planned: u32,
    /// Agents it held, each counted once.
    pub agents: u32,
    /// Signals sent to its agents while they were in it: as many as its
    /// signal rows (`signals` on its page and in its API).
    pub signals_sent: u32,
    /// Agent-minutes stranded, degraded and planned in it (while open: as
    /// of its agents' last change). A planned incident's are all planned;
    /// an unplanned one has none planned.
    pub agent_minutes_stranded: f64,
    pub agent_minutes_degraded: f64,
    pub agent_minutes_planned: f64,
    /// Time from joining to healthy of the agents that recovered: median
    /// and longest, in milliseconds (once it has ended).
    pub recover_p50_ms: Option<f64>,
    pub recover_max_ms: Option<f64>,
    /// Why it is planned, when it is (`null` otherwise): its minutes are
    /// not counted as stranded; whether its agents were acted on and it
    /// was told is the plan's one rule (`Plan::handling`): a window's
    /// neither, a rollout's told.
    pub planned: Option<Planned>,
}

impl Incident {
    /// Its severity (see [`Severity`]).
    pub fn severity(&self) -> Severity {
        Severity::of(self.peak_stranded)
    }

    /// Its peak in words (see [`peak_words`]).
    pub fn peak_words(&self) -> String {
        peak_words(self.peak_stranded, self.peak_degraded, self.peak_planned)
    }

    /// Its agent-minutes in words, as every surface says them: "21.9
    /// stranded, 3.0 degraded", or a planned incident's "21.9 planned".
    pub fn minutes_words(&self) -> String {
        if self.planned.is_some() {
            format!("{:.1} planned", self.agent_minutes_planned)
        } else {
            format!(
                "{:.1} stranded, {:.1} degraded",
                self.agent_minutes_stranded, self.agent_minutes_degraded
            )
        }
    }
}

/// An incident's peak in words, by standing, as every surface says it:
/// "38 stranded, 2 degraded", "133 degraded", "200 planned".
pub fn peak_words(stranded: u32, degraded: u32, planned: u32) -> String {
    let parts: Vec<String> = [
        (stranded, "stranded"),
        (degraded, "degraded"),
        (planned, "planned"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, w)| format!("{n} {w}"))
    .collect();
    if parts.is_empty() {
        "0 agents".into()
    } else {
        parts.join(", ")
    }
}

/// What an incident's cause and resource say, in words.
pub fn title(cause: CauseKind, r: &str) -> String {
    let r = if r.is_empty() { "?" } else { r };
    match cause {
        CauseKind::ProxyExpired => format!("{r} expired"),
        CauseKind::ProxyMissing => format!("{r} missing (tunnels point at a deleted proxy)"),
        CauseKind::ProxyDeparted => format!("{r} departed (shut down gracefully)"),
        CauseKind::AuthNotServing => format!("{r} NOT_SERVING"),
        CauseKind::AuthUnknown => format!("{r} health UNKNOWN"),
        CauseKind::AuthExpired => format!("{r} stopped heartbeating"),
        CauseKind::TunnelExpired => "tunnel records expired".to_string(),
        CauseKind::NoTunnels => "agents without tunnels".to_string(),
        CauseKind::AgentExpired => format!("agents' own heartbeats expired (auth server {r})"),
    }
}

impl Incident {
    /// `cluster`'s incident `r`, as the API shows it.
    pub fn of(cluster: ClusterName, r: IncidentRecord) -> Incident {
        let ms = |us: Option<i64>| us.map(|us| us as f64 / 1000.0);
        Incident {
            id: r.id,
            cluster,
            cause: r.cause,
            title: match r.planned {
                Some(p) => format!("{} ({})", title(r.cause, &r.resource), p.words()),
                None => title(r.cause, &r.resource),
            },
            resource: r.resource,
            started: r.started,
            ended: r.ended,
            open: r.ended.is_none(),
            peak_stranded: r.peak_stranded,
            peak_degraded: r.peak_degraded,
            peak_planned: r.peak_planned,
            agents: r.agents,
            signals_sent: r.signals,
            agent_minutes_stranded: r.stranded_us as f64 / 60e6,
            agent_minutes_degraded: r.degraded_us as f64 / 60e6,
            agent_minutes_planned: r.planned_us as f64 / 60e6,
            recover_p50_ms: ms(r.recover_p50_us),
            recover_max_ms: ms(r.recover_max_us),
            planned: r.planned.map(Planned::from),
        }
    }
}

super::named_enum! {
    "snake_case";
    /// How bad an incident is: `critical` once it has stranded an agent,
    /// `warning` while it has only degraded them. It only rises, so an
    /// incident's alert changes labels at most once.
    pub enum Severity {
        Warning,
        Critical,
    }
}

impl Severity {
    /// The severity of an incident that stranded at most `peak_stranded`
    /// agents at once.
    pub fn of(peak_stranded: u32) -> Severity {
        if peak_stranded > 0 {
            Severity::Critical
        } else {
            Severity::Warning
        }
    }
}

impl std::fmt::Display for Severity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
