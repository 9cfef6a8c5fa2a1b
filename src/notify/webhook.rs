//! One webhook: the outbox's events, in order, each signed and posted
//! until the receiver answers 2xx or the event is older than the
//! webhook's `max_age` (then dropped, logged and counted). Delivery is at
//! least once: an event is marked delivered after its answer, so a leader
//! that dies between the two leaves it to the next one to send again;
//! each body carries the event's id for the receiver to deduplicate.
//! A receiver that hangs holds only its own webhook: each has a task of
//! its own, and every attempt has a timeout.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use super::alert::{self, Context};
use super::{client, sign, NotifyError};
use crate::backoff::Backoff;
use crate::clock::{Clock, Ts};
use crate::config::{WebhookConfig, WebhookFormat};
use crate::domain::{text, NoticeKind};
use crate::stats::{Channel, DropReason, NotifyOutcome, Stats};
use crate::store::outbox::{self, Delivery, DeliveryOutcome, Event};
use crate::store::{Db, Leadership};

/// Retries: from a second, doubling, to five minutes, full jitter.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
/// How long the loop waits after the database failed it.
const DB_RETRY: Duration = Duration::from_secs(5);
/// How long an idle webhook sleeps between looks (it is woken sooner when
/// an event is written).
const IDLE: Duration = Duration::from_secs(5);

pub struct Webhook {
    cfg: WebhookConfig,
    client: reqwest::Client,
    cx: Context,
    db: Db,
    clock: Clock,
    stats: Arc<Stats>,
}

/// How one event's delivery ended, for the loop.
enum Ended {
    /// Delivered or dropped: on to the next.
    Done,
    /// This replica stopped leading, or Lifeline is stopping.
    Interrupted,
}

impl Webhook {
    pub fn new(
        cfg: WebhookConfig,
        cx: Context,
        db: Db,
        rt: &crate::supervise::Runtime,
    ) -> Result<Webhook, NotifyError> {
        // The secret is read at each delivery (it can rotate), but a file
        // that cannot be read stops start-up, where an operator sees it.
        client::secret(&cfg.secret_file)?;
        let client = client::build(cfg.ca_file.as_deref(), cfg.timeout)?;
        Ok(Webhook {
            cfg,
            client,
            cx,
            db,
            clock: rt.clock,
            stats: rt.stats.clone(),
        })
    }

    pub async fn run(
        self,
        mut leadership: watch::Receiver<Leadership>,
        mut newest: watch::Receiver<i64>,
        stop: CancellationToken,
    ) {
        let span = info_span!("notify.webhook", webhook = %self.cfg.name);
        async move {
            'lead: loop {
                while !leadership.borrow_and_update().leading {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = super::standing_changed(&mut leadership) => {}
                    }
                }
                let mut cursor = match self.place().await {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(error = %e, "reading the webhook's place in the events failed; will retry");
                        if pause(&stop, DB_RETRY).await {
                            return;
                        }
                        continue;
                    }
                };
                loop {
                    if !leadership.borrow().leading {
                        continue 'lead;
                    }
                    let events = match outbox::after(&self.db, cursor, outbox::PAGE).await {
                        Ok(e) => e,
                        Err(e) => {
                            warn!(error = %e, "reading events to deliver failed; will retry");
                            if pause(&stop, DB_RETRY).await {
                                return;
                            }
                            continue;
                        }
                    };
                    if events.is_empty() {
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = super::written(&mut newest) => {}
                            _ = super::standing_changed(&mut leadership) => {}
                            _ = tokio::time::sleep(IDLE) => {}
                        }
                        continue;
                    }
                    // Whether the place is past what was last recorded:
                    // a delivery records its own; skipped events do not.
                    let mut unrecorded = false;
                    for ev in &events {
                        let wanted = ev.kind.parse::<NoticeKind>().is_ok_and(|k| self.cfg.wants(k));
                        unrecorded = !wanted;
                        if wanted {
                            match self.deliver(ev, &mut leadership, &stop).await {
                                Ended::Done => {}
                                // Stopping, or no longer leading.
                                Ended::Interrupted if stop.is_cancelled() => return,
                                Ended::Interrupted => continue 'lead,
                            }
                        }
                        cursor = ev.id;
                    }
                    // Events it is not sent move its place too (written only
                    // when the page ended on one).
                    if unrecorded {
                        if let Err(e) = outbox::skip(&self.db, &self.cfg.name, cursor).await {
                            warn!(error = %e, "recording the webhook's place failed; events may be looked at again");
                        }
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Where this webhook is in the events (a new one starts after the
    /// newest).
    async fn place(&self) -> Result<i64, sqlx::Error> {
        let start = outbox::newest(&self.db).await?;
        let place = outbox::cursor(&self.db, &self.cfg.name, start).await?;
        debug!(
            after = place,
            "the webhook delivers the events after this one"
        );
        Ok(place)
    }

    /// Sends `ev` until it is answered 2xx, dropped, or interrupted.
    async fn deliver(
        &self,
        ev: &Event,
        leadership: &mut watch::Receiver<Leadership>,
        stop: &CancellationToken,
    ) -> Ended {
        // Its age counts from the event's own time, not from when this
        // replica began to deliver it: a restart or a new leader resets
        // nothing, and a receiver back after a day is not paged about it.
        let born = Ts(ev.at_us);
        let too_old = |now: Ts| now.since(born) >= self.cfg.max_age;
        let body = match self.body(ev) {
            Some(b) => b,
            None => {
                warn!(event = ev.id, kind = %ev.kind, "an event's stored body is not JSON; dropped");
                self.stats.dropped(Channel::Webhook, DropReason::Unreadable);
                return self
                    .finish(
                        ev,
                        DeliveryOutcome::Dropped,
                        0,
                        None,
                        None,
                        Some("the stored body is not JSON".into()),
                    )
                    .await;
            }
        };
        let mut attempts: u32 = 0;
        loop {
            // Checked before every attempt, the first and each retry after
            // its backoff: an event is never sent once it is too old.
            if too_old(self.clock.now()) {
                self.stats.dropped(Channel::Webhook, DropReason::TooOld);
                warn!(event = ev.id, kind = %ev.kind, attempts, "a webhook event is older than max_age; dropped");
                let why = format!(
                    "older than max_age ({}) before it could be delivered",
                    humantime::format_duration(self.cfg.max_age)
                );
                return self
                    .finish(
                        ev,
                        DeliveryOutcome::Dropped,
                        attempts,
                        None,
                        None,
                        Some(why),
                    )
                    .await;
            }
            attempts = attempts.saturating_add(1);
            let (status, latency, error) = tokio::select! {
                _ = stop.cancelled() => return Ended::Interrupted,
                r = self.attempt(ev, &body) => r,
            };
            let delivered = status.is_some_and(|s| (200..300).contains(&s));
            let outcome = if delivered {
                self.stats
                    .notified(Channel::Webhook, NotifyOutcome::Delivered);
                DeliveryOutcome::Delivered
            } else {
                self.stats.notified(Channel::Webhook, NotifyOutcome::Failed);
                if attempts == 1 {
                    warn!(event = ev.id, kind = %ev.kind, status, error = error.as_deref().unwrap_or(""),
                          "a webhook delivery failed; retrying with backoff");
                }
                DeliveryOutcome::Retrying
            };
            let ended = self
                .finish(ev, outcome, attempts, status, Some(latency), error)
                .await;
            if outcome.is_final() {
                if attempts > 1 && delivered {
                    info!(
                        event = ev.id,
                        attempts, "a webhook delivery succeeded after retries"
                    );
                }
                return ended;
            }
            let wait = RETRY.delay(attempts.saturating_sub(1));
            tokio::select! {
                _ = stop.cancelled() => return Ended::Interrupted,
                _ = tokio::time::sleep(wait) => {}
                _ = super::standing_changed(leadership) => {
                    if !leadership.borrow().leading {
                        return Ended::Interrupted;
                    }
                }
            }
            if !leadership.borrow().leading {
                return Ended::Interrupted;
            }
        }
    }

    /// One POST: the receiver's status (if it answered), the time it
    /// took, and why it failed (never the URL or the secret).
    async fn attempt(&self, ev: &Event, body: &[u8]) -> (Option<u16>, Duration, Option<String>) {
        let secret = match client::secret(&self.cfg.secret_file) {
            Ok(s) => s,
            Err(e) => return (None, Duration::ZERO, Some(e.to_string())),
        };
        let unix = self.clock.now().as_micros().div_euclid(1_000_000);
        let started = self.clock.instant();
        let sent = self
            .client
            .post(&self.cfg.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(sign::HEADER, sign::signature(&secret, unix, body))
            .header("X-Lifeline-Event", ev.kind.as_str())
            .header("X-Lifeline-Delivery", ev.id.to_string())
            .body(body.to_vec())
            .send()
            .await;
        let latency = self.clock.instant().saturating_duration_since(started);
        match sent {
            Ok(r) => {
                let s = r.status();
                let why = (!s.is_success()).then(|| format!("answered {s}"));
                (Some(s.as_u16()), latency, why)
            }
            // reqwest's errors name the URL; only the kind is kept.
            Err(e) => (None, latency, Some(kind_of(&e).into())),
        }
    }

    async fn finish(
        &self,
        ev: &Event,
        outcome: DeliveryOutcome,
        attempts: u32,
        status: Option<u16>,
        latency: Option<Duration>,
        error: Option<String>,
    ) -> Ended {
        let d = Delivery {
            webhook: self.cfg.name.clone(),
            event_id: ev.id,
            kind: ev.kind.clone(),
            at: self.clock.now(),
            outcome,
            status,
            latency_ms: latency.map(|l| l.as_secs_f64() * 1000.0),
            attempts,
            error: error.map(|e| text::excerpt(&e)),
        };
        if let Err(e) = outbox::record(&self.db, &d).await {
            // Delivered but not recorded: sent again later (at least once).
            warn!(event = ev.id, error = %e, "recording a webhook delivery failed");
        }
        Ended::Done
    }

    /// The body sent for `ev`, in this webhook's format.
    fn body(&self, ev: &Event) -> Option<Vec<u8>> {
        let v = envelope(ev, &self.cx)?;
        let out = match self.cfg.format {
            WebhookFormat::Json => v,
            WebhookFormat::Slack => json!({ "text": slack_text(&v) }),
        };
        serde_json::to_vec(&out).ok()
    }
}

/// The event as a webhook receives it: `{id, type, created, cluster,
/// data}`; an incident's `data.incident` is the API's incident with its
/// severity and page.
pub fn envelope(ev: &Event, cx: &Context) -> Option<Value> {
    let stored: Value = serde_json::from_str(&ev.body).ok()?;
    let data = match ev.incident_id {
        Some(id) if stored.is_object() => {
            let mut inc = stored;
            let stranded = inc["peak_stranded"].as_u64().unwrap_or(0);
            inc["severity"] = json!(alert::severity_of(stranded));
            inc["url"] = json!(cx.page(id));
            json!({ "incident": inc })
        }
        _ => stored,
    };
    Some(json!({
        "id": ev.id,
        "type": ev.kind,
        "created": Ts(ev.at_us).rfc3339(),
        "cluster": cx.cluster,
        "data": data,
    }))
}

/// Text from the network or an operator, safe in a Slack message: `&`,
/// `<` and `>` escaped (Slack's own rule), so a name or a reason can
/// neither mention (`<!channel>`) nor link.
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line for Slack, for every kind of event: the cluster, what
/// happened and, for an incident, a link. Every name, title and reason
/// is escaped.
pub fn slack_text(v: &Value) -> String {
    let e = |v: &Value| slack_escape(v.as_str().unwrap_or(""));
    let kind = v["type"].as_str().unwrap_or("event");
    let cluster = e(&v["cluster"]);
    let data = &v["data"];
    let i = &data["incident"];
    if i.is_object() {
        let verb = kind.strip_prefix("incident.").unwrap_or(kind);
        let n = |k: &str| u32::try_from(i[k].as_u64().unwrap_or(0)).unwrap_or(u32::MAX);
        let peak = crate::store::incidents::peak_words(
            n("peak_stranded"),
            n("peak_degraded"),
            n("peak_planned"),
        );
        // A link's URL may hold neither `|` nor `>`.
        let url: String = i["url"]
            .as_str()
            .unwrap_or("")
            .chars()
            .filter(|c| !matches!(c, '|' | '<' | '>'))
            .collect();
        format!(
            "[{cluster}] Incident {} {verb}: {} ({}). {} agents, peak {peak}; {} signals sent. <{url}|Open in Lifeline>",
            n("id"),
            e(&i["title"]),
            e(&i["severity"]),
            n("agents"),
            n("signals_sent"),
        )
    } else if data["window"].is_object() {
        let w = &data["window"];
        let targets: Vec<String> = w["targets"]
            .as_array()
            .map(|t| t.iter().map(e).collect())
            .unwrap_or_default();
        format!(
            "[{cluster}] Maintenance window {} {}: {} ({} to {}): {}",
            w["id"].as_i64().unwrap_or(0),
            kind.strip_prefix("maintenance.").unwrap_or(kind),
            targets.join(", "),
            e(&w["from"]),
            e(&w["until"]),
            e(&w["reason"]),
        )
    } else if kind == "restarts.paused" {
        let what = match (
            data["reconnects_paused"].as_bool().unwrap_or(false),
            data["restarts_paused"].as_bool().unwrap_or(false),
        ) {
            (true, true) => "Automatic reconnects and restarts are paused",
            (false, true) => "Automatic restarts are paused",
            _ => "Automatic reconnects are paused",
        };
        format!("[{cluster}] {what}: {}", e(&data["reason"]))
    } else if kind == "restarts.resumed" {
        format!("[{cluster}] Automatic reconnects and restarts resumed")
    } else {
        format!("[{cluster}] {}", slack_escape(kind))
    }
}

fn kind_of(e: &reqwest::Error) -> &'static str {
    if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_redirect() {
        "redirected (not followed)"
    } else if e.is_body() || e.is_decode() {
        "the answer broke off"
    } else {
        "the request failed"
    }
}

/// Waits `d`; true if Lifeline is stopping.
async fn pause(stop: &CancellationToken, d: Duration) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(d) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{envelope, slack_text};
    use crate::clock::Ts;
    use crate::domain::{CauseKind, IncidentRecord};
    use crate::store::incidents::Incident;
    use crate::store::outbox::Event;
    use serde_json::json;

    /// The text is read from the body the store writes (the API's
    /// incident): a field renamed there fails here, not silently in Slack.
    #[test]
    fn slack_reads_the_figures_of_the_body_the_store_writes() {
        let i = Incident::from(IncidentRecord {
            id: 7,
            cause: CauseKind::ProxyExpired,
            resource: "proxy-1".into(),
            started: Ts(1_700_000_000_000_000),
            ended: None,
            peak_stranded: 3,
            peak_degraded: 2,
            peak_planned: 0,
            agents: 12,
            signals: 5,
            stranded_us: 0,
            degraded_us: 0,
            planned_us: 0,
            recover_p50_us: None,
            recover_max_us: None,
            planned: None,
        });
        let ev = Event {
            id: 1,
            at_us: i.started.as_micros(),
            kind: "incident.opened".into(),
            incident_id: Some(7),
            body: serde_json::to_string(&i).expect("json"),
        };
        let cx = crate::notify::alert::Context {
            cluster: "prod".into(),
            external_url: "https://ll.example.com".into(),
            runbook_url: String::new(),
        };
        let v = envelope(&ev, &cx).expect("an envelope");
        assert_eq!(
            slack_text(&v),
            "[prod] Incident 7 opened: proxy-1 expired (critical). 12 agents, peak 3 stranded, \
             2 degraded; 5 signals sent. <https://ll.example.com/incidents/7|Open in Lifeline>"
        );
    }

    #[test]
    fn every_event_reads_as_a_sentence_with_names_and_reasons_escaped() {
        let incident = json!({"type": "incident.opened", "cluster": "prod & <b>", "data": {"incident": {
            "id": 7, "title": "<!channel> proxy-1 expired", "severity": "warning", "agents": 133,
            "peak_stranded": 0, "peak_degraded": 133, "peak_planned": 0, "signals_sent": 2,
            "url": "https://ll.example.com/incidents/7|x>"}}});
        assert_eq!(
            slack_text(&incident),
            "[prod &amp; &lt;b&gt;] Incident 7 opened: &lt;!channel&gt; proxy-1 expired (warning). \
             133 agents, peak 133 degraded; 2 signals sent. <https://ll.example.com/incidents/7x|Open in Lifeline>"
        );
        let window = json!({"type": "maintenance.started", "cluster": "prod", "data": {"window": {
            "id": 3, "targets": ["proxy/<@U123>"], "from": "2026-11-29T02:00:00Z",
            "until": "2026-11-29T04:00:00Z", "reason": "<https://evil.example|click here>"}}});
        assert_eq!(
            slack_text(&window),
            "[prod] Maintenance window 3 started: proxy/&lt;@U123&gt; (2026-11-29T02:00:00Z to \
             2026-11-29T04:00:00Z): &lt;https://evil.example|click here&gt;"
        );
        let paused = json!({"type": "restarts.paused", "cluster": "prod", "data": {
            "reconnects_paused": false, "restarts_paused": true,
            "reason": "the last 3 restarts did not bring their agents back", "agents": 10}});
        assert_eq!(
            slack_text(&paused),
            "[prod] Automatic restarts are paused: the last 3 restarts did not bring their agents back"
        );
        let resumed = json!({"type": "restarts.resumed", "cluster": "prod", "data": {}});
        assert_eq!(
            slack_text(&resumed),
            "[prod] Automatic reconnects and restarts resumed"
        );
        for v in [&incident, &window, &paused, &resumed] {
            let t = slack_text(v);
            assert!(
                !t.contains('{') && !t.contains("_paused"),
                "no raw JSON: {t}"
            );
        }
    }
}
