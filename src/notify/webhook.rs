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

use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use super::alert::Context;
use super::{client, sign, NotifyError};
use crate::backoff::Backoff;
use crate::clock::{Clock, Ts};
use crate::config::{WebhookConfig, WebhookFormat};
use crate::domain::maintenance::WindowView;
use crate::domain::{text, About, Incident, Notice, NoticeKind, PauseNotice, Severity};
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
        let body = match ev
            .notice()
            .map_err(|e| e.to_string())
            .and_then(|n| self.body(&n).map_err(|e| e.to_string()))
        {
            Ok(b) => b,
            Err(why) => {
                warn!(event = ev.id, kind = %ev.kind, error = %why, "an event's stored body does not read as its kind; dropped");
                self.stats.dropped(Channel::Webhook, DropReason::Unreadable);
                return self
                    .finish(ev, DeliveryOutcome::Dropped, 0, None, None, Some(why))
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

    /// The body sent for `n`, in this webhook's format.
    fn body(&self, n: &Notice) -> Result<Vec<u8>, serde_json::Error> {
        match self.cfg.format {
            WebhookFormat::Json => serde_json::to_vec(&envelope(n, &self.cx)),
            WebhookFormat::Slack => serde_json::to_vec(&json!({ "text": slack_text(n, &self.cx) })),
        }
    }
}

/// What Lifeline posts to a webhook (`format = "json"`), signed in
/// `X-Lifeline-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookEvent {
    /// The event's id: the same at every attempt (deduplicate by it).
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: NoticeKind,
    /// When it happened.
    pub created: Ts,
    /// The cluster it is about: an incident's own, else the one
    /// configured (`[notify] cluster` instead, where set).
    pub cluster: String,
    pub data: WebhookData,
}

/// What the event is about: `incident` with `incident.*` events, `window`
/// with `maintenance.*` events, and the pause's own fields with
/// `restarts.*` events.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct WebhookData {
    /// With `incident.*` events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incident: Option<IncidentEvent>,
    /// With `maintenance.*` events: the window as it was then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowView>,
    /// With `restarts.*` events.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseNotice>,
}

/// An incident as the API shows it, with its severity and its page.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct IncidentEvent {
    #[serde(flatten)]
    pub incident: Incident,
    pub severity: Severity,
    /// Its page on the dashboard.
    pub url: String,
}

/// The notice as a webhook receives it: `{id, type, created, cluster,
/// data}`; an incident's `data.incident` is the API's incident with its
/// severity and page.
pub fn envelope(n: &Notice, cx: &Context) -> WebhookEvent {
    let data = match &n.about {
        About::Incident(i) => WebhookData {
            incident: Some(IncidentEvent {
                incident: i.clone(),
                severity: i.severity(),
                url: cx.page(i.id),
            }),
            ..WebhookData::default()
        },
        About::Window(w) => WebhookData {
            window: Some(w.clone()),
            ..WebhookData::default()
        },
        About::Pause(p) => WebhookData {
            pause: Some(p.clone()),
            ..WebhookData::default()
        },
    };
    WebhookEvent {
        id: n.id,
        kind: n.kind,
        created: n.at,
        cluster: cx.cluster(&n.about),
        data,
    }
}

/// Text from the network or an operator, safe in a Slack message: `&`,
/// `<` and `>` escaped (Slack's own rule), so a name or a reason can
/// neither mention (`<!channel>`) nor link.
pub fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line for Slack, for every kind of notice: the cluster, what
/// happened and, for an incident, a link. Every name, title and reason
/// is escaped.
pub fn slack_text(n: &Notice, cx: &Context) -> String {
    let e = |s: &str| slack_escape(s);
    let cluster = e(&cx.cluster(&n.about));
    let kind = n.kind.as_str();
    match &n.about {
        About::Incident(i) => {
            let verb = kind.strip_prefix("incident.").unwrap_or(kind);
            // A link's URL may hold neither `|` nor `>`.
            let url: String = cx
                .page(i.id)
                .chars()
                .filter(|c| !matches!(c, '|' | '<' | '>'))
                .collect();
            format!(
                "[{cluster}] Incident {} {verb}: {} ({}). {} agents, peak {}; {} signals sent. <{url}|Open in Lifeline>",
                i.id,
                e(&i.title),
                i.severity(),
                i.agents,
                i.peak_words(),
                i.signals_sent,
            )
        }
        About::Window(w) => {
            let targets: Vec<String> = w.targets.iter().map(|t| e(t)).collect();
            format!(
                "[{cluster}] Maintenance window {} {}: {} ({} to {}): {}",
                w.id,
                kind.strip_prefix("maintenance.").unwrap_or(kind),
                targets.join(", "),
                w.from,
                w.until,
                e(&w.reason),
            )
        }
        About::Pause(_) if n.kind == NoticeKind::RestartsResumed => {
            format!("[{cluster}] Automatic reconnects and restarts resumed")
        }
        About::Pause(p) => {
            let what = match (p.reconnects_paused, p.restarts_paused) {
                (true, true) => "Automatic reconnects and restarts are paused",
                (false, true) => "Automatic restarts are paused",
                _ => "Automatic reconnects are paused",
            };
            format!(
                "[{cluster}] {what}: {}",
                e(p.reason.as_deref().unwrap_or(""))
            )
        }
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
    use crate::domain::maintenance::{Target, Window, WindowView};
    use crate::domain::{About, Incident, IncidentRecord, Notice, NoticeKind, PauseNotice};
    use crate::notify::alert::Context;
    use crate::store::outbox::Event;

    fn cx(cluster: &str, external_url: &str) -> Context {
        Context {
            home: "default".into(),
            relabel: Some(cluster.into()),
            external_url: external_url.into(),
            runbook_url: String::new(),
        }
    }

    fn incident(resource: &str, peak_stranded: u32, peak_degraded: u32) -> Incident {
        Incident::of(
            "default".into(),
            IncidentRecord {
                resource: resource.into(),
                peak_stranded,
                peak_degraded,
                ..IncidentRecord::example()
            },
        )
    }

    /// The text is read from the very row the store writes, typed again:
    /// a field renamed in the incident fails here, not silently in Slack.
    #[test]
    fn slack_reads_the_figures_of_the_row_the_store_writes() {
        let i = incident("proxy-1", 3, 2);
        let kind = NoticeKind::IncidentOpened;
        let ev = Event {
            id: 1,
            at_us: i.started.as_micros(),
            kind: kind.as_str().into(),
            incident_id: Some(7),
            body: About::Incident(i).stored(kind).expect("stored"),
        };
        let n = ev.notice().expect("the stored row reads as its notice");
        let cx = cx("prod", "https://ll.example.com");
        assert_eq!(
            slack_text(&n, &cx),
            "[prod] Incident 7 opened: proxy-1 expired (critical). 12 agents, peak 3 stranded, \
             2 degraded; 5 signals sent. <https://ll.example.com/incidents/7|Open in Lifeline>"
        );
        let v = serde_json::to_value(envelope(&n, &cx)).expect("json");
        assert_eq!(v["data"]["incident"]["severity"], "critical");
        assert_eq!(
            v["data"]["incident"]["url"],
            "https://ll.example.com/incidents/7"
        );
        assert_eq!(v["type"], "incident.opened");
        assert!(v["data"].get("window").is_none(), "{v}");
    }

    #[test]
    fn every_event_reads_as_a_sentence_with_names_and_reasons_escaped() {
        let at = Ts(1_700_000_000_000_000);
        let notice = |kind, about| Notice {
            id: 1,
            at,
            kind,
            about,
        };
        let incident = notice(
            NoticeKind::IncidentOpened,
            About::Incident(incident("<!channel> proxy-1", 0, 133)),
        );
        let hostile = cx("prod & <b>", "https://ll.example.com|x>");
        assert_eq!(
            slack_text(&incident, &hostile),
            "[prod &amp; &lt;b&gt;] Incident 7 opened: &lt;!channel&gt; proxy-1 expired (warning). \
             12 agents, peak 133 degraded; 5 signals sent. <https://ll.example.comx/incidents/7|Open in Lifeline>"
        );
        let from = Ts(1_764_381_600_000_000);
        let w = Window {
            id: 3,
            targets: vec![Target::parse("proxy/node-<1>").expect("a target")],
            from,
            until: Ts(from.as_micros() + 7_200_000_000),
            reason: "<https://evil.example|click here>".into(),
            created_by: "alice".into(),
            created_at: from,
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        };
        let window = notice(
            NoticeKind::MaintenanceStarted,
            About::Window(WindowView::of(&w, from)),
        );
        let prod = cx("prod", "https://ll.example.com");
        let said = slack_text(&window, &prod);
        assert!(
            said.starts_with("[prod] Maintenance window 3 started: proxy/node-&lt;1&gt; ("),
            "{said}"
        );
        assert!(
            said.ends_with("): &lt;https://evil.example|click here&gt;"),
            "{said}"
        );
        let pause = PauseNotice {
            reconnects_paused: false,
            restarts_paused: true,
            reason: Some("the last 3 restarts did not bring their agents back".into()),
            stranded_in_window: 0,
            agents: 10,
        };
        let paused = notice(NoticeKind::RestartsPaused, About::Pause(pause.clone()));
        assert_eq!(
            slack_text(&paused, &prod),
            "[prod] Automatic restarts are paused: the last 3 restarts did not bring their agents back"
        );
        let resumed = notice(NoticeKind::RestartsResumed, About::Pause(pause));
        assert_eq!(
            slack_text(&resumed, &prod),
            "[prod] Automatic reconnects and restarts resumed"
        );
        for n in [&incident, &window, &paused, &resumed] {
            let t = slack_text(n, &prod);
            assert!(
                !t.contains('{') && !t.contains("_paused"),
                "no raw JSON: {t}"
            );
        }
    }
}
