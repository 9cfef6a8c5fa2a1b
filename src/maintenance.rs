//! The maintenance room: windows operators declare (`targets`, `from`,
//! `until`, `reason`) so the strandings they explain are *planned*:
//! shown, not acted on, not notified.
//!
//! Owns: validating a window request, creating, ending and deleting
//! windows (each with its audit row, through `store::maintenance`), the
//! windows in force as every replica's fleet judges them (loaded at start,
//! after each change, and when another replica announces one), and, on
//! the leader, telling each window's start and end to the outbox.
//! Must not touch: the rule of what a window explains (`domain`), the
//! fleet's model (it is handed the windows), HTTP (roles are the caller's).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use crate::clock::{Clock, Ts};
use crate::domain::maintenance::{MAX_REASON, MAX_TARGETS};
use crate::domain::{text, Target, TargetError, Window, Windows};
use crate::fleet::FleetHandle;
use crate::store::maintenance::{self as rows, Ended, NewWindow};
use crate::store::{Db, Leadership};

/// The longest window: one planned for longer is a mistake.
pub const MAX_LENGTH: Duration = Duration::from_secs(366 * 24 * 3600);

/// How often the leader looks for starts and ends to tell, at the least
/// (it also wakes at the next one it knows of, and after every change).
const TELL_EVERY: Duration = Duration::from_secs(30);

/// The contract's rule between `targets` and `all`: a target over
/// everything (a name of only `*`) needs `"all": true`. Added to the
/// request's schema as `if`/`then` (OpenAPI 3.1), which the derive cannot
/// say.
pub fn all_rule() -> serde_json::Value {
    serde_json::json!({
        "if": {
            "properties": {"targets": {"contains": {"pattern": "^(proxy|auth_server|agent)/\\*+$"}}},
            "required": ["targets"]
        },
        "then": {"properties": {"all": {"const": true}}, "required": ["all"]}
    })
}

/// `targets` in the contract: 1 to 100, each as [`TARGET_PATTERN`] says.
fn targets_schema() -> utoipa::openapi::schema::Array {
    use crate::domain::maintenance::{MAX_TARGET, TARGET_PATTERN};
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(TARGET_PATTERN))
                .max_length(Some(MAX_TARGET)),
        )
        .min_items(Some(1))
        .max_items(Some(MAX_TARGETS))
        .build()
}

/// What an operator asks for.
#[derive(Clone, Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WindowRequest {
    /// `kind/name-or-glob`: `proxy/proxy-2`, `auth_server/auth-*`,
    /// `agent/node-1?` (globs: `*`, `?`, `[a-z]`, `[!a-z]`). A name of
    /// only `*` names every resource of its kind, and needs `all`.
    #[schema(schema_with = targets_schema)]
    pub targets: Vec<String>,
    /// Say `true` to declare a window over every agent or every proxy
    /// (a target such as `agent/*`): one that wide is never an accident.
    #[serde(default)]
    pub all: bool,
    /// RFC 3339; now when left out.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub from: Option<String>,
    /// RFC 3339, after `from` and not yet past; at most 366 days after
    /// `from`.
    #[schema(format = DateTime)]
    pub until: String,
    /// Why: shown on the dashboard and in the audit (something besides
    /// spaces).
    #[schema(min_length = 1, max_length = 1000, pattern = r"\S")]
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MaintenanceError {
    #[error("targets: {0}")]
    Targets(String),
    #[error("target {index}: {error}")]
    Target { index: usize, error: TargetError },
    #[error("{field}: not an RFC 3339 time between 1970 and 9999")]
    Time { field: &'static str },
    #[error("the window would never be active: until ({until}) is not after its start ({from}; a window starts now at the earliest)")]
    NeverActive { from: Ts, until: Ts },
    #[error("reason: {0}")]
    Reason(String),
    #[error("target {0} names every resource of its kind: say \"all\": true (--all) to mean it")]
    Everything(String),
    #[error("no maintenance window {0}")]
    Missing(i64),
    #[error("maintenance window {0} is already over")]
    AlreadyOver(i64),
    #[error("{} maintenance windows are scheduled or active, the most there may be: end or delete one first", rows::MAX_IN_FORCE)]
    Full,
    #[error("maintenance window {0} is already deleted")]
    AlreadyDeleted(i64),
    #[error("the store: {0}")]
    Store(#[from] sqlx::Error),
}

impl MaintenanceError {
    /// The request itself is wrong (400), not the store (503).
    pub fn is_bad_request(&self) -> bool {
        !matches!(
            self,
            MaintenanceError::Missing(_)
                | MaintenanceError::AlreadyOver(_)
                | MaintenanceError::Full
                | MaintenanceError::AlreadyDeleted(_)
                | MaintenanceError::NeverActive { .. }
                | MaintenanceError::Store(_)
        )
    }
}

fn time(field: &'static str, s: &str) -> Result<Ts, MaintenanceError> {
    Ts::parse_rfc3339(s).ok_or(MaintenanceError::Time { field })
}

/// Checks a request against the rules, at `now`; with the window, what was
/// taken differently from what was asked (said, not refused: the rule
/// is between fields and the clock, which the schema cannot state).
///
/// - A window starts now at the earliest: an earlier `from` is now.
/// - One whose `until` is not after its start would never be active, and
///   is refused as a conflict with the clock (409), like ending one that
///   is already over.
/// - One longer than 366 days ends 366 days after its start.
pub fn validate(
    req: &WindowRequest,
    now: Ts,
) -> Result<(NewWindow, Vec<String>), MaintenanceError> {
    let mut warnings = Vec::new();
    if req.targets.is_empty() {
        return Err(MaintenanceError::Targets("at least one is needed".into()));
    }
    if req.targets.len() > MAX_TARGETS {
        return Err(MaintenanceError::Targets(format!("at most {MAX_TARGETS}")));
    }
    let mut targets: Vec<Target> = Vec::with_capacity(req.targets.len());
    for (index, t) in req.targets.iter().enumerate() {
        let t = Target::parse(t).map_err(|error| MaintenanceError::Target { index, error })?;
        if t.is_everything() && !req.all {
            return Err(MaintenanceError::Everything(t.as_str().to_string()));
        }
        if !targets.contains(&t) {
            targets.push(t);
        }
    }
    let from = match &req.from {
        Some(f) => time("from", f)?.max(now),
        None => now,
    };
    let mut until = time("until", &req.until)?;
    if until <= from {
        return Err(MaintenanceError::NeverActive { from, until });
    }
    if until.since(from) > MAX_LENGTH {
        until = from.saturating_add(MAX_LENGTH);
        warnings.push(format!(
            "a window lasts at most 366 days: this one ends at {until}"
        ));
    }
    let reason = req.reason.trim();
    if reason.is_empty() {
        return Err(MaintenanceError::Reason(
            "say why (it is shown and audited)".into(),
        ));
    }
    if reason.chars().count() > MAX_REASON {
        return Err(MaintenanceError::Reason(format!(
            "at most {MAX_REASON} characters"
        )));
    }
    Ok((
        NewWindow {
            targets,
            from,
            until,
            reason: text::clean(reason).into_owned(),
        },
        warnings,
    ))
}

/// The room's front, shared by the API and the replica room.
pub struct Maintenance {
    db: Db,
    clock: Clock,
    fleet: FleetHandle,
    /// The windows not over, as last read: the fleet's, and the banner's.
    in_force: watch::Sender<Arc<Vec<Window>>>,
    /// Wakes the teller after a change.
    changed: Notify,
}

impl Maintenance {
    /// Loads the windows in force, hands them to the fleet, and starts the
    /// leader's teller on `rt`.
    pub async fn start(
        db: Db,
        fleet: FleetHandle,
        leadership: watch::Receiver<Leadership>,
        rt: &mut crate::supervise::Runtime,
    ) -> Arc<Maintenance> {
        let m = Arc::new(Maintenance {
            db,
            clock: rt.clock,
            fleet,
            in_force: watch::Sender::new(Arc::new(Vec::new())),
            changed: Notify::new(),
        });
        m.reload().await;
        let teller = m.clone();
        let stop = rt.shutdown.clone();
        rt.tasks.track(
            "maintenance teller",
            tokio::spawn(
                async move { teller.tell(leadership, stop).await }
                    .instrument(info_span!("maintenance.tell")),
            ),
        );
        m
    }

    /// Reads the windows in force again and hands them to the fleet (after
    /// a change here, or one another replica announced).
    pub async fn reload(&self) {
        let now = self.clock.now();
        match rows::in_force(&self.db, now).await {
            Ok(list) => {
                // The fleet holds each window as it holds in its cluster.
                let cluster = self.fleet.cluster();
                let here = list.iter().filter_map(|w| w.in_cluster(cluster)).collect();
                self.fleet.set_windows(Windows::new(here)).await;
                self.in_force.send_replace(Arc::new(list));
                self.changed.notify_one();
            }
            Err(e) => {
                warn!(error = %e, "reading the maintenance windows failed; the last ones read stay in force")
            }
        }
    }

    /// The windows not over, as last read.
    pub fn in_force(&self) -> Arc<Vec<Window>> {
        self.in_force.borrow().clone()
    }

    /// Active now, as last read.
    pub fn active(&self) -> Vec<Window> {
        let now = self.clock.now();
        self.in_force()
            .iter()
            .filter(|w| w.active(now))
            .cloned()
            .collect()
    }

    pub fn now(&self) -> Ts {
        self.clock.now()
    }

    /// Creates a window; with it, a warning for each target that names
    /// nothing the fleet knows now (likely a typo: it is enforced all the
    /// same, for what may appear).
    pub async fn create(
        &self,
        req: &WindowRequest,
        actor: &str,
    ) -> Result<(Window, Vec<String>), MaintenanceError> {
        let now = self.clock.now();
        let (new, mut warnings) = validate(req, now)?;
        let known = self
            .fleet
            .known_targets(new.targets.clone())
            .await
            .unwrap_or_default();
        // One warning a target: a cluster not watched, else nothing known.
        let cluster = self.fleet.cluster();
        warnings.extend(new.targets.iter().zip(known).filter_map(|(t, known)| {
            if !t.in_cluster(cluster) {
                Some(format!(
                    "target {} names no cluster Lifeline watches (watched: {cluster})",
                    t.as_str()
                ))
            } else {
                (!known).then(|| format!("target {} names nothing Lifeline knows now", t.as_str()))
            }
        }));
        let w = rows::create(&self.db, &new, actor, now)
            .await?
            .ok_or(MaintenanceError::Full)?;
        info!(
            window = w.id,
            actor,
            targets = w.targets.len(),
            from = %w.from,
            until = %w.until,
            "maintenance window created"
        );
        self.reload().await;
        Ok((w, warnings))
    }

    pub async fn end(&self, id: i64, actor: &str) -> Result<Window, MaintenanceError> {
        let now = self.clock.now();
        match rows::end(&self.db, id, actor, now).await? {
            Ended::Done(w) => {
                info!(window = id, actor, "maintenance window ended early");
                self.reload().await;
                Ok(w)
            }
            Ended::Missing => Err(MaintenanceError::Missing(id)),
            Ended::AlreadyOver(_) => Err(MaintenanceError::AlreadyOver(id)),
            Ended::AlreadyDeleted => Err(MaintenanceError::AlreadyDeleted(id)),
        }
    }

    pub async fn delete(&self, id: i64, actor: &str) -> Result<Window, MaintenanceError> {
        let now = self.clock.now();
        match rows::delete(&self.db, id, actor, now).await? {
            Ended::Done(w) => {
                info!(window = id, actor, "maintenance window deleted");
                self.reload().await;
                Ok(w)
            }
            Ended::AlreadyDeleted => Err(MaintenanceError::AlreadyDeleted(id)),
            Ended::AlreadyOver(_) | Ended::Missing => Err(MaintenanceError::Missing(id)),
        }
    }

    pub async fn get(&self, id: i64) -> Result<Window, MaintenanceError> {
        rows::get(&self.db, id)
            .await?
            .ok_or(MaintenanceError::Missing(id))
    }

    pub async fn list(
        &self,
        before: Option<i64>,
        over: bool,
        limit: u32,
    ) -> Result<Vec<Window>, MaintenanceError> {
        Ok(rows::list(&self.db, before, over, self.clock.now(), limit).await?)
    }

    pub async fn audit(&self, id: i64) -> Result<Vec<rows::AuditRow>, MaintenanceError> {
        Ok(rows::audit_of(&self.db, id).await?)
    }

    /// While leading, tells each window's start and end as it comes (and
    /// any a previous leader left untold); every replica also reads the
    /// windows again when one ends, so the list it shows stays current.
    async fn tell(&self, mut leadership: watch::Receiver<Leadership>, stop: CancellationToken) {
        // Whether to look for starts and ends to tell now: at start, after
        // a change, at each window's moment and every `TELL_EVERY`.
        let mut due = true;
        // The moment the next look is for (the clock may wake earlier).
        let mut at = self.clock.now();
        // Whether `at` is a window's own start or end (else only the
        // periodic look, which needs no new read of the list).
        let mut at_a_change = false;
        let mut watching = true;
        loop {
            if due && leadership.borrow().leading {
                match rows::tell_due(&self.db, self.clock.now()).await {
                    Ok(0) => {}
                    Ok(n) => info!(events = n, "maintenance windows' starts and ends told"),
                    Err(e) => {
                        warn!(error = %e, "telling maintenance windows' starts and ends failed; will retry")
                    }
                }
            }
            if due {
                // Read after telling: the deadline is the window's own
                // moment, however long telling took.
                let now = self.clock.now();
                let latest = now.saturating_add(TELL_EVERY);
                let change = Windows::new(self.in_force().to_vec()).next_change(now);
                at_a_change = change.is_some_and(|t| t <= latest);
                at = change.map_or(latest, |t| t.min(latest));
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.changed.notified() => due = true,
                // A new leader tells at once what the last one left.
                r = leadership.changed(), if watching => {
                    // A closed watch (a process alone, which always leads)
                    // has no news.
                    watching = r.is_ok();
                    due = watching;
                }
                _ = tokio::time::sleep_until(self.clock.instant_at(at)) => {
                    due = self.clock.now() >= at;
                    if due && at_a_change {
                        // One started or ended: read the list again.
                        self.reload().await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(targets: &[&str], from: Option<&str>, until: &str, reason: &str) -> WindowRequest {
        WindowRequest {
            targets: targets.iter().map(|s| s.to_string()).collect(),
            from: from.map(str::to_string),
            until: until.into(),
            reason: reason.into(),
            all: false,
        }
    }

    #[test]
    fn a_request_is_refused_with_what_is_wrong() {
        let now = Ts::parse_rfc3339("2026-11-28T12:00:00Z").unwrap();
        let (ok, _) = validate(
            &req(
                &["proxy/p1", "proxy/p1"],
                None,
                "2026-11-28T13:00:00Z",
                " patching ",
            ),
            now,
        )
        .unwrap();
        assert_eq!(
            (ok.targets.len(), ok.from, ok.reason.as_str()),
            (1, now, "patching")
        );
        // Any RFC 3339 time: an offset or a lowercase z, kept in UTC.
        let (offset, _) = validate(
            &req(
                &["proxy/p1"],
                Some("2026-11-28t14:30:00+02:00"),
                "2026-11-28T13:00:00z",
                "x",
            ),
            now,
        )
        .unwrap();
        assert_eq!(offset.from.rfc3339(), "2026-11-28T12:30:00.000Z");
        assert_eq!(offset.until.rfc3339(), "2026-11-28T13:00:00.000Z");
        let many: Vec<String> = (0..=MAX_TARGETS).map(|i| format!("agent/a{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let cases: Vec<(WindowRequest, &str)> = vec![
            (
                req(&[], None, "2026-11-28T13:00:00Z", "x"),
                "targets: at least one",
            ),
            (
                req(&many, None, "2026-11-28T13:00:00Z", "x"),
                "targets: at most 100",
            ),
            (
                req(&["node/a"], None, "2026-11-28T13:00:00Z", "x"),
                "target 0: unknown target kind",
            ),
            (
                req(&["agent/a"], None, "tomorrow", "x"),
                "until: not an RFC 3339",
            ),
            (
                req(&["agent/*"], None, "2026-11-28T13:00:00Z", "x"),
                "names every resource",
            ),
            (
                req(&["agent/a"], None, "2026-11-28T13:00:00Z", "  "),
                "reason: say why",
            ),
            (
                req(
                    &["agent/a"],
                    None,
                    "2026-11-28T13:00:00Z",
                    &"x".repeat(MAX_REASON + 1),
                ),
                "reason: at most",
            ),
        ];
        for (r, want) in cases {
            let e = validate(&r, now).expect_err(want);
            assert!(e.to_string().contains(want), "{e} does not say {want:?}");
            assert!(e.is_bad_request());
        }
        // Between fields and the clock: never active is a conflict (409);
        // an earlier start is now; too long ends at 366 days, said.
        for (from, until) in [
            (Some("2026-11-28T14:00:00Z"), "2026-11-28T13:00:00Z"),
            (Some("2026-11-28T10:00:00Z"), "2026-11-28T11:00:00Z"),
            (None, "0001-01-01T00:00:00Z"),
        ] {
            let e = validate(&req(&["agent/a"], from, until, "x"), now).expect_err(until);
            assert!(matches!(e, MaintenanceError::NeverActive { .. }), "{e}");
            assert!(!e.is_bad_request());
        }
        let (early, said) = validate(
            &req(
                &["agent/a"],
                Some("0001-01-01T00:00:00Z"),
                "2026-11-28T13:00:00Z",
                "x",
            ),
            now,
        )
        .unwrap();
        assert_eq!(
            (early.from, said.len()),
            (now, 0),
            "an earlier start is now"
        );
        let (long, said) =
            validate(&req(&["agent/a"], None, "2030-11-28T13:00:00Z", "x"), now).unwrap();
        assert_eq!(long.until, now.saturating_add(MAX_LENGTH));
        assert!(said[0].contains("at most 366 days"), "{said:?}");
        let (ctl, _) = validate(
            &req(&["agent/a"], None, "2026-11-28T13:00:00Z", "a\u{7}b"),
            now,
        )
        .unwrap();
        assert_eq!(ctl.reason, "a\u{FFFD}b", "control characters replaced");
    }
}
