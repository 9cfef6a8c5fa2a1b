//! What Lifeline tells people: a [`Notice`] is one event told, its kind
//! (one name from the config file to the webhook's body) and what it is
//! about, typed per kind. The store writes a notice in the transaction of
//! its cause and reads it back as this type; every renderer (a webhook's
//! JSON, Slack, Alertmanager) works from it, never from stored text.

use serde::{Deserialize, Serialize};

use super::incident::Incident;
use super::maintenance::WindowView;
use crate::clock::Ts;

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

    /// What a notice of this kind is about.
    pub fn subject(self) -> NoticeSubject {
        match self {
            NoticeKind::IncidentOpened
            | NoticeKind::IncidentUpdated
            | NoticeKind::IncidentResolved => NoticeSubject::Incident,
            NoticeKind::RestartsPaused | NoticeKind::RestartsResumed => NoticeSubject::Pause,
            NoticeKind::MaintenanceStarted | NoticeKind::MaintenanceEnded => NoticeSubject::Window,
        }
    }

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

/// What a kind of notice is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum NoticeSubject {
    Incident,
    Window,
    Pause,
}

/// What one notice is about: the typed body of its kind.
#[derive(Clone, Debug, PartialEq)]
pub enum About {
    /// `incident.*`: the incident as the API shows it then.
    Incident(Incident),
    /// `maintenance.*`: the window as it was then.
    Window(WindowView),
    /// `restarts.*`.
    Pause(PauseNotice),
}

/// One event told: written once, in the transaction of its cause; its id
/// orders it and is the receivers' key to deduplicate by.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub id: i64,
    /// When what it tells happened.
    pub at: Ts,
    pub kind: NoticeKind,
    pub about: About,
}

/// A notice that cannot be written or read as its kind says.
#[derive(Debug, thiserror::Error)]
pub enum NoticeError {
    #[error("not a kind of notice: {0:?}")]
    Kind(String),
    #[error("a notice of kind {kind} cannot be about a {about}")]
    Mismatch {
        kind: NoticeKind,
        about: &'static str,
    },
    #[error("a {kind} notice's body does not read as one: {why}")]
    Body { kind: NoticeKind, why: String },
}

/// A window's stored body: `{"window": …}`.
#[derive(Serialize, Deserialize)]
struct StoredWindow<W> {
    window: W,
}

impl About {
    pub fn subject(&self) -> NoticeSubject {
        match self {
            About::Incident(_) => NoticeSubject::Incident,
            About::Window(_) => NoticeSubject::Window,
            About::Pause(_) => NoticeSubject::Pause,
        }
    }

    /// The body column's text for a notice of `kind` about this: the
    /// incident's JSON, `{"window": …}`, or the pause's JSON. Refused if
    /// `kind` is about something else.
    pub fn stored(&self, kind: NoticeKind) -> Result<String, NoticeError> {
        if kind.subject() != self.subject() {
            return Err(NoticeError::Mismatch {
                kind,
                about: self.subject().into(),
            });
        }
        let json = match self {
            About::Incident(i) => serde_json::to_string(i),
            About::Window(w) => serde_json::to_string(&StoredWindow { window: w }),
            About::Pause(p) => serde_json::to_string(p),
        };
        json.map_err(|e| NoticeError::Body {
            kind,
            why: e.to_string(),
        })
    }
}

impl Notice {
    /// A notice as stored (id, time, kind name, body text), typed again;
    /// a kind this build does not know or a body that does not read as
    /// its kind is an error naming which.
    pub fn read(id: i64, at: Ts, kind: &str, body: &str) -> Result<Notice, NoticeError> {
        let kind: NoticeKind = kind
            .parse()
            .map_err(|_| NoticeError::Kind(super::text::excerpt(kind)))?;
        let bad = |e: serde_json::Error| NoticeError::Body {
            kind,
            why: e.to_string(),
        };
        let about = match kind.subject() {
            NoticeSubject::Incident => About::Incident(serde_json::from_str(body).map_err(bad)?),
            NoticeSubject::Window => {
                let w: StoredWindow<WindowView> = serde_json::from_str(body).map_err(bad)?;
                About::Window(w.window)
            }
            NoticeSubject::Pause => About::Pause(serde_json::from_str(body).map_err(bad)?),
        };
        Ok(Notice {
            id,
            at,
            kind,
            about,
        })
    }

    /// The incident it is about, if it is about one.
    pub fn incident(&self) -> Option<&Incident> {
        match &self.about {
            About::Incident(i) => Some(i),
            _ => None,
        }
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

    fn incident() -> Incident {
        Incident::of(
            "default".into(),
            crate::domain::IncidentRecord {
                started: Ts(1_700_000_000_123_000),
                peak_stranded: 3,
                peak_degraded: 2,
                stranded_us: 60_000_000,
                planned: Some(crate::domain::Plan::Rollout),
                ..crate::domain::IncidentRecord::example()
            },
        )
    }

    fn pause() -> PauseNotice {
        PauseNotice {
            reconnects_paused: true,
            restarts_paused: false,
            reason: Some("12 agents stranded within 30s".into()),
            stranded_in_window: 12,
            agents: 100,
        }
    }

    /// Every kind is written and read back as the same typed notice: what
    /// a renderer gets is what the store was given.
    #[test]
    fn every_kind_is_read_back_as_the_notice_that_was_written() {
        let at = Ts(1_700_000_000_000_000);
        let window = crate::domain::maintenance::Window {
            id: 3,
            targets: vec![crate::domain::Target::parse("proxy/proxy-*").expect("a target")],
            from: at,
            until: Ts(at.as_micros() + 3_600_000_000),
            reason: "kernel update".into(),
            created_by: "alice".into(),
            created_at: at,
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        };
        for kind in NoticeKind::ALL {
            let about = match kind.subject() {
                NoticeSubject::Incident => About::Incident(incident()),
                NoticeSubject::Window => About::Window(WindowView::of(&window, at)),
                NoticeSubject::Pause => About::Pause(pause()),
            };
            let body = about.stored(*kind).expect("written");
            let n = Notice::read(9, at, kind.as_str(), &body).expect("read back");
            assert_eq!(
                n,
                Notice {
                    id: 9,
                    at,
                    kind: *kind,
                    about
                }
            );
        }
    }

    #[test]
    fn a_notice_that_is_not_what_its_kind_says_is_refused_with_why() {
        let mismatch = About::Pause(pause()).stored(NoticeKind::IncidentOpened);
        assert_eq!(
            mismatch.expect_err("refused").to_string(),
            "a notice of kind incident.opened cannot be about a pause"
        );
        let unknown = Notice::read(1, Ts(0), "incident.closed", "{}").expect_err("refused");
        assert_eq!(
            unknown.to_string(),
            "not a kind of notice: \"incident.closed\""
        );
        // A field renamed (or a row from another build) is an error, not
        // an incident with zeros.
        let mut v = serde_json::to_value(incident()).expect("json");
        let peak = v["peak_stranded"].take();
        v["peak"] = peak;
        if let Some(o) = v.as_object_mut() {
            o.remove("peak_stranded");
        }
        let renamed =
            Notice::read(1, Ts(0), "incident.opened", &v.to_string()).expect_err("refused");
        assert!(renamed.to_string().contains("peak_stranded"), "{renamed}");
        let hostile = Notice::read(
            1,
            Ts(0),
            "restarts.paused",
            "{\"reconnects_paused\": \"\\u0000\"}",
        )
        .expect_err("refused");
        assert!(
            hostile
                .to_string()
                .starts_with("a restarts.paused notice's body does not read as one"),
            "{hostile}"
        );
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
