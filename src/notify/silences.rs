//! Maintenance windows as Alertmanager silences: while a window is
//! active, each of its targets whose kind `[notify.alertmanager.silences]`
//! maps to labels is silenced in every Alertmanager, so the window mutes
//! the cluster's own alerts about it, not only Lifeline's.
//!
//! Lifeline's silences are `createdBy = "lifeline"`, with a comment that
//! starts `lifeline maintenance window <id> (<target>)`: that is how they
//! are found again. The leader reconciles at start, on each change of
//! leader, when a window starts or ends (an outbox event) and every
//! `resend`: it creates the silences an active window lacks (`endsAt` its
//! end) and expires those whose window is no longer active (ended early,
//! deleted). An Alertmanager that was down is reconciled when it answers
//! again; nothing is duplicated by a restart.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use super::alertmanager::{authorized, failure};
use super::{client, NotifyError};
use crate::clock::{Clock, Ts};
use crate::config::AlertmanagerConfig;
use crate::domain::{Target, Window};
use crate::store::{maintenance, Db, Leadership};

/// Who Lifeline's silences say made them.
pub const CREATED_BY: &str = "lifeline";

/// One label matcher, as Alertmanager's v2 API writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    pub name: String,
    pub value: String,
    pub is_regex: bool,
    #[serde(default = "yes")]
    pub is_equal: bool,
}

fn yes() -> bool {
    true
}

/// A silence Lifeline wants: one per active window and silenced target.
#[derive(Clone, Debug, PartialEq)]
pub struct Wanted {
    /// `lifeline maintenance window 3 (proxy/proxy-2)`: how it is found.
    pub key: String,
    pub matchers: Vec<Matcher>,
    pub ends: Ts,
    /// The key and the window's reason.
    pub comment: String,
}

/// The silences `windows` call for at `now`: each active window's targets
/// whose kind has labels.
pub fn wanted(cfg: &crate::config::SilenceConfig, windows: &[Window], now: Ts) -> Vec<Wanted> {
    let mut out = Vec::new();
    for w in windows.iter().filter(|w| w.active(now)) {
        for t in &w.targets {
            let labels = cfg.of(t.kind);
            if labels.is_empty() {
                continue;
            }
            let key = format!("lifeline maintenance window {} ({})", w.id, t.as_str());
            out.push(Wanted {
                comment: format!("{key}: {}", w.reason),
                key,
                matchers: matchers(labels, t),
                ends: w.end(),
            });
        }
    }
    out
}

/// The matchers of target `t`: each label's value with `{name}` the
/// target's name (a glob makes it a regex, the rest of the value escaped).
fn matchers(labels: &std::collections::BTreeMap<String, String>, t: &Target) -> Vec<Matcher> {
    labels
        .iter()
        .map(|(name, template)| {
            let (value, is_regex) = if t.is_glob() && template.contains("{name}") {
                let parts: Vec<String> = template.split("{name}").map(regex_escape).collect();
                (parts.join(&t.regex()), true)
            } else {
                (template.replace("{name}", t.name()), false)
            };
            Matcher {
                name: name.clone(),
                value,
                is_regex,
                is_equal: true,
            }
        })
        .collect()
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A silence as Alertmanager lists it (what reconciling reads).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    id: String,
    #[serde(default)]
    created_by: String,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    matchers: Vec<Matcher>,
    #[serde(default)]
    ends_at: String,
    status: Status,
}

impl Listed {
    /// Whether it is the silence `w` wants: its key, its matchers, its end
    /// (to the second: Alertmanager keeps milliseconds).
    fn is(&self, w: &Wanted) -> bool {
        same_key(&self.comment, &w.key)
            && self.matchers == w.matchers
            && Ts::parse_rfc3339(&self.ends_at)
                .is_some_and(|e| e.since(w.ends).as_secs() < 2 && w.ends.since(e).as_secs() < 2)
    }
}

#[derive(Clone, Debug, Deserialize)]
struct Status {
    state: String,
}

pub struct Silencer {
    cfg: AlertmanagerConfig,
    client: reqwest::Client,
    db: Db,
    clock: Clock,
    /// Alertmanagers whose last reconcile failed (logged once each).
    failing: HashSet<usize>,
}

impl Silencer {
    pub fn new(
        cfg: &AlertmanagerConfig,
        db: Db,
        rt: &crate::supervise::Runtime,
    ) -> Result<Silencer, NotifyError> {
        Ok(Silencer {
            client: client::build(cfg.ca_file.as_deref(), cfg.timeout)?,
            cfg: cfg.clone(),
            db,
            clock: rt.clock,
            failing: HashSet::new(),
        })
    }

    pub async fn run(
        mut self,
        mut leadership: watch::Receiver<Leadership>,
        mut newest: watch::Receiver<i64>,
        stop: CancellationToken,
    ) {
        let span = info_span!("notify.silences", urls = self.cfg.urls.len());
        async move {
            loop {
                if leadership.borrow().leading {
                    self.round().await;
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(self.cfg.resend) => {}
                    _ = super::written(&mut newest) => {}
                    _ = super::standing_changed(&mut leadership) => {}
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Reconciles every Alertmanager with the windows active now.
    async fn round(&mut self) {
        let now = self.clock.now();
        let windows = match maintenance::in_force(&self.db, now).await {
            Ok(w) => w,
            Err(e) => {
                warn!(error = %e, "reading maintenance windows for Alertmanager silences failed; will retry");
                return;
            }
        };
        let want = wanted(&self.cfg.silences, &windows, now);
        for (i, base) in self.cfg.urls.clone().iter().enumerate() {
            match self.reconcile(base, &want, now).await {
                Ok((made, expired)) => {
                    if self.failing.remove(&i) {
                        info!(alertmanager = i, "Alertmanager silences reconciled again");
                    }
                    if made + expired > 0 {
                        info!(
                            alertmanager = i,
                            made,
                            expired,
                            "Alertmanager silences reconciled with the maintenance windows"
                        );
                    }
                }
                Err(why) => {
                    if self.failing.insert(i) {
                        warn!(alertmanager = i, error = %why, "reconciling Alertmanager silences failed; will retry");
                    }
                }
            }
        }
    }

    /// Makes `base`'s Lifeline silences what `want` says: (made, expired).
    async fn reconcile(
        &self,
        base: &str,
        want: &[Wanted],
        now: Ts,
    ) -> Result<(usize, usize), String> {
        let base = base.trim_end_matches('/');
        let listed: Vec<Listed> = {
            let req = authorized(
                &self.cfg,
                self.client.get(format!("{base}/api/v2/silences")),
            )?;
            let r = req.send().await.map_err(|e| failure(&e).to_string())?;
            if !r.status().is_success() {
                return Err(format!("listing silences answered {}", r.status()));
            }
            r.json()
                .await
                .map_err(|_| "the silence list is not JSON".to_string())?
        };
        let ours: Vec<&Listed> = listed
            .iter()
            .filter(|s| s.created_by == CREATED_BY)
            .filter(|s| s.status.state == "active" || s.status.state == "pending")
            .collect();
        let mut made = 0;
        for w in want {
            if ours.iter().any(|s| s.is(w)) {
                continue;
            }
            let body = serde_json::json!({
                "matchers": w.matchers,
                "startsAt": now.rfc3339(),
                "endsAt": w.ends.rfc3339(),
                "createdBy": CREATED_BY,
                "comment": w.comment,
            });
            let req = authorized(
                &self.cfg,
                self.client
                    .post(format!("{base}/api/v2/silences"))
                    .json(&body),
            )?;
            let r = req.send().await.map_err(|e| failure(&e).to_string())?;
            if !r.status().is_success() {
                return Err(format!("creating a silence answered {}", r.status()));
            }
            debug!(key = %w.key, "silence created");
            made += 1;
        }
        let mut expired = 0;
        for s in ours {
            if want.iter().any(|w| s.is(w)) {
                continue;
            }
            let id: String =
                s.id.chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
            let req = authorized(
                &self.cfg,
                self.client.delete(format!("{base}/api/v2/silence/{id}")),
            )?;
            let r = req.send().await.map_err(|e| failure(&e).to_string())?;
            if !r.status().is_success() {
                return Err(format!("expiring a silence answered {}", r.status()));
            }
            debug!(silence = %id, comment = %s.comment, "silence expired");
            expired += 1;
        }
        Ok((made, expired))
    }
}

/// Whether a silence's comment is the one of `key` (the key, then `:`
/// and the reason): window 3 is not window 31.
fn same_key(comment: &str, key: &str) -> bool {
    comment
        .strip_prefix(key)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(':'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SilenceConfig;
    use std::time::Duration;

    fn window(id: i64, targets: &[&str], from: Ts, until: Ts) -> Window {
        Window {
            id,
            targets: targets
                .iter()
                .map(|t| Target::parse(t).expect("target"))
                .collect(),
            from,
            until,
            reason: "patch".into(),
            created_by: "admin".into(),
            created_at: from,
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        }
    }

    #[test]
    fn an_active_windows_targets_become_matchers_and_globs_regexes() {
        let now = Ts::parse_rfc3339("2026-11-29T10:00:00Z").expect("ts");
        let later = now.saturating_add(Duration::from_secs(3600));
        let cfg = SilenceConfig {
            proxy: [("instance".to_string(), "{name}:3080".to_string())].into(),
            ..SilenceConfig::default()
        };
        let windows = [
            window(
                3,
                &["proxy/proxy-2", "proxy/db.[!x]-*", "agent/a1"],
                now,
                later,
            ),
            window(
                4,
                &["proxy/p9"],
                later,
                later.saturating_add(Duration::from_secs(60)),
            ),
        ];
        let w = wanted(&cfg, &windows, now);
        assert_eq!(
            w.len(),
            2,
            "agents have no labels; window 4 is not active: {w:?}"
        );
        assert_eq!(w[0].key, "lifeline maintenance window 3 (proxy/proxy-2)");
        assert_eq!(
            w[0].comment,
            "lifeline maintenance window 3 (proxy/proxy-2): patch"
        );
        assert_eq!(w[0].ends, later);
        assert_eq!(
            w[0].matchers,
            [Matcher {
                name: "instance".into(),
                value: "proxy-2:3080".into(),
                is_regex: false,
                is_equal: true
            }]
        );
        assert_eq!(w[1].matchers[0].value, r"db\.[^x]-.*:3080");
        assert!(w[1].matchers[0].is_regex);
        assert!(same_key(
            "lifeline maintenance window 3 (proxy/p): x",
            "lifeline maintenance window 3 (proxy/p)"
        ));
        assert!(!same_key(
            "lifeline maintenance window 31 (proxy/p): x",
            "lifeline maintenance window 3"
        ));
    }
}
