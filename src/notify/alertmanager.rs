//! Incidents posted to every Alertmanager (`POST /api/v2/alerts`), driven
//! by the same notices the webhooks deliver: each `incident.*` notice
//! updates what this leader holds and is posted at once; every `resend`
//! the open ones are posted again, each post's `endsAt` `ends_after`
//! ahead; an `incident.resolved` is posted with `endsAt` at its end until
//! every Alertmanager took it, then forgotten. A new leader starts from
//! the database once (the incidents open or ended within `ends_after`,
//! and the newest notice's id) and follows the notices from there, so
//! nothing is re-listed round after round and nothing is lost to a change
//! of leader.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use super::alert::{self, Alert, Context};
use super::{client, NotifyError};
use crate::clock::Clock;
use crate::config::AlertmanagerConfig;
use crate::domain::{Incident, NoticeSubject, Plan, Severity};
use crate::stats::{Channel, DropReason, NotifyOutcome, Stats};
use crate::store::incidents::{self, IncidentFilter};
use crate::store::{outbox, Db, Leadership};

/// The most incidents held (and so posted) at once: past it, the oldest
/// are let go (Alertmanager ends them at their last `endsAt`).
const MAX_ALERTS: usize = 1000;
/// How soon a start the database failed is tried again.
const DB_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Poster {
    cfg: AlertmanagerConfig,
    client: reqwest::Client,
    cx: Context,
    db: Db,
    clock: Clock,
    stats: Arc<Stats>,
    /// The incidents this leader posts, by id: each as its newest notice
    /// said, with the severity it was last posted under.
    held: BTreeMap<i64, Held>,
    /// The last notice read (`None`: this tenure has not started yet).
    cursor: Option<i64>,
    /// Which Alertmanagers failed at the last post (logged once each).
    failing: HashSet<usize>,
}

struct Held {
    incident: Incident,
    posted: Option<Severity>,
}

impl Poster {
    pub fn new(
        cfg: &AlertmanagerConfig,
        cx: Context,
        db: Db,
        rt: &crate::supervise::Runtime,
    ) -> Result<Poster, NotifyError> {
        for f in [&cfg.bearer_token_file, &cfg.basic_auth_password_file]
            .into_iter()
            .flatten()
        {
            client::secret(f)?;
        }
        Ok(Poster {
            client: client::build(cfg.ca_file.as_deref(), cfg.timeout)?,
            cfg: cfg.clone(),
            cx,
            db,
            clock: rt.clock,
            stats: rt.stats.clone(),
            held: BTreeMap::new(),
            cursor: None,
            failing: HashSet::new(),
        })
    }

    pub async fn run(
        mut self,
        mut leadership: watch::Receiver<Leadership>,
        mut newest: watch::Receiver<i64>,
        stop: CancellationToken,
    ) {
        let span = info_span!("notify.alertmanager", urls = self.cfg.urls.len());
        async move {
            let mut resend = self.clock.instant();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep_until(resend) => {}
                    _ = super::written(&mut newest) => {}
                    _ = super::standing_changed(&mut leadership) => {}
                }
                if !leadership.borrow().leading {
                    // A leader again later starts from the database.
                    self.held.clear();
                    self.cursor = None;
                    continue;
                }
                let due = self.clock.instant() >= resend;
                let mut changed = false;
                if self.cursor.is_none() {
                    changed = self.start().await;
                }
                if self.cursor.is_some() {
                    changed |= self.follow().await;
                }
                if changed || due {
                    self.post_held().await;
                }
                if due {
                    resend = self.clock.deadline_in(self.cfg.resend);
                }
                if self.cursor.is_none() {
                    // The database failed the start: tried again soon.
                    resend = resend.min(self.clock.deadline_in(DB_RETRY));
                }
            }
        }
        .instrument(span)
        .await
    }

    /// A tenure's start: the newest notice's id, then the incidents open
    /// or ended within `ends_after` (a notice written in between is read
    /// again by [`Self::follow`], which only brings an incident up to
    /// date). True if it holds any.
    async fn start(&mut self) -> bool {
        let newest = match outbox::newest(&self.db).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "reading where the notices stand failed; will retry");
                return false;
            }
        };
        let filter = IncidentFilter {
            since: Some(self.clock.now().saturating_sub(self.cfg.ends_after)),
            limit: MAX_ALERTS as u32,
            ..IncidentFilter::default()
        };
        let list = match incidents::list(&self.db, &filter).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "reading the incidents to post to Alertmanager failed; will retry");
                return false;
            }
        };
        // What a plan explains is told only as its one rule says (the
        // notices are written by the same rule).
        for i in list
            .into_iter()
            .filter(|i| Plan::handling(i.planned.as_ref().and_then(|p| p.plan())).told)
        {
            self.hold(i);
        }
        debug!(
            held = self.held.len(),
            after = newest,
            "posting to Alertmanager from here"
        );
        self.cursor = Some(newest);
        !self.held.is_empty()
    }

    /// Reads the notices after the cursor; true if any was about an
    /// incident.
    async fn follow(&mut self) -> bool {
        let mut changed = false;
        while let Some(after) = self.cursor {
            let events = match outbox::after(&self.db, after, outbox::PAGE).await {
                Ok(e) => e,
                Err(e) => {
                    warn!(error = %e, "reading notices for Alertmanager failed; will retry");
                    return changed;
                }
            };
            let Some(last) = events.last().map(|e| e.id) else {
                return changed;
            };
            for ev in &events {
                match ev.notice() {
                    Ok(n) => {
                        if let Some(i) = n.incident() {
                            self.hold(i.clone());
                            changed = true;
                        }
                    }
                    Err(e) => {
                        let incident = ev
                            .kind
                            .parse::<crate::domain::NoticeKind>()
                            .ok()
                            .map(|k| k.subject())
                            == Some(NoticeSubject::Incident);
                        if incident {
                            self.stats
                                .dropped(Channel::Alertmanager, DropReason::Unreadable);
                            warn!(event = ev.id, error = %e, "a notice does not read as its kind; not posted");
                        }
                    }
                }
            }
            self.cursor = Some(last);
        }
        changed
    }

    /// Holds `i` as its newest notice says (keeping what it was posted
    /// under), within [`MAX_ALERTS`].
    fn hold(&mut self, i: Incident) {
        let posted = self.held.remove(&i.id).and_then(|h| h.posted);
        self.held.insert(
            i.id,
            Held {
                incident: i,
                posted,
            },
        );
        while self.held.len() > MAX_ALERTS {
            if let Some((id, _)) = self.held.pop_first() {
                debug!(
                    incident = id,
                    "more incidents than Alertmanager is posted; the oldest let go"
                );
            }
        }
    }

    /// Posts every held incident to every Alertmanager; forgets the ended
    /// ones once all took them.
    async fn post_held(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let now = self.clock.now();
        let mut alerts: Vec<Alert> = Vec::new();
        for h in self.held.values() {
            let i = &h.incident;
            let severity = i.severity();
            if let Some(old) = h.posted.filter(|old| *old != severity) {
                // Its labels change: the alert under the old ones ends now.
                let mut gone = alert::alert(i, &self.cx, now, self.cfg.ends_after, old);
                gone.ends_at = now.rfc3339();
                alerts.push(gone);
            }
            let labels = if i.open {
                severity
            } else {
                h.posted.unwrap_or(severity)
            };
            alerts.push(alert::alert(i, &self.cx, now, self.cfg.ends_after, labels));
        }
        if self.post_all(&alerts).await {
            self.held.retain(|_, h| h.incident.open);
            for h in self.held.values_mut() {
                h.posted = Some(h.incident.severity());
            }
        }
    }

    /// Posts `alerts` to every Alertmanager at once; true if all took them.
    async fn post_all(&mut self, alerts: &[Alert]) -> bool {
        let body = match serde_json::to_vec(alerts) {
            Ok(b) => b,
            Err(e) => {
                warn!(error = %e, "alerts could not be written as JSON");
                return false;
            }
        };
        let posts = self.cfg.urls.iter().map(|u| self.post(u, body.clone()));
        let results = futures::future::join_all(posts).await;
        let mut all = true;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(()) => {
                    self.stats
                        .notified(Channel::Alertmanager, NotifyOutcome::Delivered);
                    if self.failing.remove(&i) {
                        info!(alertmanager = i, "posting to Alertmanager works again");
                    }
                }
                Err(why) => {
                    all = false;
                    self.stats
                        .notified(Channel::Alertmanager, NotifyOutcome::Failed);
                    if self.failing.insert(i) {
                        warn!(alertmanager = i, error = %why, "posting alerts to Alertmanager failed; posting again at the next round");
                    }
                }
            }
        }
        all
    }

    async fn post(&self, base: &str, body: Vec<u8>) -> Result<(), String> {
        let url = format!("{}/api/v2/alerts", base.trim_end_matches('/'));
        let req = self
            .client
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match authorized(&self.cfg, req)?.send().await {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("answered {}", r.status())),
            Err(e) => Err(failure(&e).into()),
        }
    }
}

/// `req` with the Alertmanager's credentials (read at each request, so
/// they can rotate); why not, in words with no secret.
pub(super) fn authorized(
    cfg: &AlertmanagerConfig,
    mut req: reqwest::RequestBuilder,
) -> Result<reqwest::RequestBuilder, String> {
    if let Some(f) = &cfg.bearer_token_file {
        let token = client::secret(f).map_err(|e| e.to_string())?;
        req = req.bearer_auth(String::from_utf8_lossy(&token));
    }
    if let (Some(user), Some(f)) = (&cfg.basic_auth_user, &cfg.basic_auth_password_file) {
        let pw = client::secret(f).map_err(|e| e.to_string())?;
        req = req.basic_auth(user, Some(String::from_utf8_lossy(&pw)));
    }
    Ok(req)
}

/// A failed request in words that name no URL.
pub(super) fn failure(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else {
        "the request failed"
    }
}
