//! What Lifeline tells people: the kinds of event a webhook can be sent,
//! each with one name from the config file to the webhook's body.

use serde::{Deserialize, Serialize};

/// A kind of event told to webhooks (`[[notify.webhooks]] events`).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
    utoipa::ToSchema,
)]
pub enum NoticeKind {
    /// An incident's first agent was stranded or degraded.
    #[serde(rename = "incident.opened")]
    #[strum(serialize = "incident.opened")]
    IncidentOpened,
    /// An open incident turned critical (its first agent stranded), or the
    /// agents it holds reached the next power of two (2, 4, 8, …): a
    /// growing outage is told a handful of times, never once per agent.
    #[serde(rename = "incident.updated")]
    #[strum(serialize = "incident.updated")]
    IncidentUpdated,
    /// Its last agent recovered or moved to another cause.
    #[serde(rename = "incident.resolved")]
    #[strum(serialize = "incident.resolved")]
    IncidentResolved,
    /// Automatic restarts and reconnects paused (the storm guard).
    #[serde(rename = "restarts.paused")]
    #[strum(serialize = "restarts.paused")]
    RestartsPaused,
    #[serde(rename = "restarts.resumed")]
    #[strum(serialize = "restarts.resumed")]
    RestartsResumed,
    /// A maintenance window began or ended.
    #[serde(rename = "maintenance.started")]
    #[strum(serialize = "maintenance.started")]
    MaintenanceStarted,
    #[serde(rename = "maintenance.ended")]
    #[strum(serialize = "maintenance.ended")]
    MaintenanceEnded,
}

impl NoticeKind {
    pub const ALL: &'static [NoticeKind] = <NoticeKind as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// What an incident whose row was `before` (none: not yet written)
    /// and is now `after` tells: opened, updated, resolved, or nothing.
    /// Counts are (agents held, peak stranded); `ended` whether it has.
    pub fn of_incident(before: Option<IncidentMark>, after: IncidentMark) -> Vec<NoticeKind> {
        let mut out = Vec::new();
        match before {
            None => out.push(NoticeKind::IncidentOpened),
            Some(b) if b.ended => return out,
            Some(b) => {
                let critical = b.peak_stranded == 0 && after.peak_stranded > 0;
                let grew = doublings(after.agents) > doublings(b.agents);
                if !after.ended && (critical || grew) {
                    out.push(NoticeKind::IncidentUpdated);
                }
            }
        }
        if after.ended {
            out.push(NoticeKind::IncidentResolved);
        }
        out
    }
}

/// What of an incident's row decides what it tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncidentMark {
    pub agents: u32,
    pub peak_stranded: u32,
    pub ended: bool,
}

/// Which power of two `n` has reached (0 for 0 and 1).
fn doublings(n: u32) -> u32 {
    n.checked_ilog2().unwrap_or(0)
}

impl std::fmt::Display for NoticeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(agents: u32, peak_stranded: u32, ended: bool) -> IncidentMark {
        IncidentMark {
            agents,
            peak_stranded,
            ended,
        }
    }

    #[test]
    fn names_round_trip_through_the_config_and_the_body() {
        for k in NoticeKind::ALL {
            assert_eq!(k.as_str().parse::<NoticeKind>().ok(), Some(*k));
            let json = serde_json::to_string(k).expect("json");
            assert_eq!(json, format!("\"{}\"", k.as_str()));
        }
        assert!("incident.closed".parse::<NoticeKind>().is_err());
    }

    #[test]
    fn an_incident_tells_its_opening_its_growth_by_doublings_and_its_end() {
        use NoticeKind::*;
        assert_eq!(
            NoticeKind::of_incident(None, mark(1, 0, false)),
            [IncidentOpened]
        );
        assert_eq!(
            NoticeKind::of_incident(None, mark(1, 1, true)),
            [IncidentOpened, IncidentResolved],
            "opened and ended within one batch"
        );
        // Degraded only, then its first stranded agent: critical now.
        assert_eq!(
            NoticeKind::of_incident(Some(mark(1, 0, false)), mark(1, 1, false)),
            [IncidentUpdated]
        );
        // 2 → 3 agents tells nothing; 3 → 4 does; 4 → 100 once.
        assert!(NoticeKind::of_incident(Some(mark(2, 2, false)), mark(3, 3, false)).is_empty());
        assert_eq!(
            NoticeKind::of_incident(Some(mark(3, 3, false)), mark(4, 4, false)),
            [IncidentUpdated]
        );
        assert_eq!(
            NoticeKind::of_incident(Some(mark(4, 4, false)), mark(100, 100, false)),
            [IncidentUpdated]
        );
        assert_eq!(
            NoticeKind::of_incident(Some(mark(4, 4, false)), mark(9, 9, true)),
            [IncidentResolved],
            "an end says only that"
        );
        assert!(
            NoticeKind::of_incident(Some(mark(4, 4, true)), mark(4, 4, true)).is_empty(),
            "an ended incident rewritten tells nothing again"
        );
    }
}

/// The body of `restarts.paused` and `restarts.resumed`: whether automatic
/// reconnects and restarts are held back, and why, as the storm guard
/// said it then.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PauseNotice {
    /// Automatic reconnects are paused (the storm guard, or cluster data
    /// that is not current).
    pub reconnects_paused: bool,
    /// Automatic restarts wait: the last ones did not bring their agents
    /// back.
    pub restarts_paused: bool,
    /// Why, in words (absent once resumed).
    pub reason: Option<String>,
    /// Agents that turned stranded within the storm guard's window.
    pub stranded_in_window: u64,
    /// Agents in the fleet then.
    pub agents: u64,
}
