//! Open incidents posted to every Alertmanager (`POST /api/v2/alerts`):
//! at once when an incident is written, and again every `resend` while it
//! is open, each post's `endsAt` `ends_after` ahead; once it has ended,
//! one more post with `endsAt` at its end resolves it. What to post is
//! read from the incidents table each time (open ones, and those ended
//! within `ends_after`), so a new leader goes on where the old one
//! stopped: it posts the open ones and resolves the recently ended.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use super::alert::{self, Alert, Context};
use super::{client, NotifyError};
use crate::clock::Clock;
use crate::config::AlertmanagerConfig;
use crate::stats::{Channel, NotifyOutcome, Stats};
use crate::store::incidents::{self, IncidentFilter};
use crate::store::{Db, Leadership};

/// The most incidents one round posts (the newest).
const MAX_ALERTS: u32 = 1000;

pub struct Poster {
    cfg: AlertmanagerConfig,
    client: reqwest::Client,
    cx: Context,
    db: Db,
    clock: Clock,
    stats: Arc<Stats>,
    /// The severity each open incident was last posted with.
    told: HashMap<i64, &'static str>,
    /// Ended incidents every Alertmanager took as resolved.
    resolved: HashSet<i64>,
    /// Which Alertmanagers failed at the last post (logged once each).
    failing: HashSet<usize>,
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
            told: HashMap::new(),
            resolved: HashSet::new(),
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
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(self.cfg.resend) => {}
                    _ = super::written(&mut newest) => {}
                    _ = super::standing_changed(&mut leadership) => {}
                }
                if !leadership.borrow().leading {
                    // A leader again later goes on from the database.
                    self.told.clear();
                    self.resolved.clear();
                    continue;
                }
                self.round().await;
            }
        }
        .instrument(span)
        .await
    }

    /// Reads what to post and posts it to every Alertmanager.
    async fn round(&mut self) {
        let now = self.clock.now();
        let filter = IncidentFilter {
            since: Some(now.saturating_sub(self.cfg.ends_after)),
            limit: MAX_ALERTS,
            ..IncidentFilter::default()
        };
        let list = match incidents::list(&self.db, &filter).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "reading incidents to post to Alertmanager failed; will retry");
                return;
            }
        };
        let mut alerts: Vec<Alert> = Vec::new();
        let mut resolving = Vec::new();
        let mut severities = Vec::new();
        // What a plan explains is told only as its one rule says.
        for i in list.iter().filter(|i| {
            crate::domain::Plan::handling(i.planned.as_ref().and_then(|p| p.plan())).told
        }) {
            let severity = alert::severity(i);
            let earlier = self.told.get(&i.id).copied();
            if let Some(old) = earlier.filter(|old| *old != severity) {
                // Its labels change: the alert under the old ones ends now.
                let mut gone = alert::alert(i, &self.cx, now, self.cfg.ends_after, old);
                gone.ends_at = now.rfc3339();
                alerts.push(gone);
            }
            if i.open {
                alerts.push(alert::alert(
                    i,
                    &self.cx,
                    now,
                    self.cfg.ends_after,
                    severity,
                ));
                severities.push((i.id, severity));
            } else if !self.resolved.contains(&i.id) {
                alerts.push(alert::alert(
                    i,
                    &self.cx,
                    now,
                    self.cfg.ends_after,
                    earlier.unwrap_or(severity),
                ));
                resolving.push(i.id);
            }
        }
        if alerts.is_empty() {
            return;
        }
        if self.post_all(&alerts).await {
            self.resolved.extend(resolving);
            for (id, s) in severities {
                self.told.insert(id, s);
            }
        }
        // Only what the window still holds is remembered.
        let kept: HashSet<i64> = list.iter().map(|i| i.id).collect();
        self.told.retain(|id, _| kept.contains(id));
        self.resolved.retain(|id| kept.contains(id));
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
