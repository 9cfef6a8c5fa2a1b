//! Lifeline's own counters: lock-free atomics shared by every room, read by
//! `/api/v1/summary` and `/metrics`, and the latency histograms `/metrics`
//! renders. Counting never blocks a hot path; labels are small fixed sets
//! (kinds, outcomes, modes), never names from the network.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Histogram;
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};
use serde::Serialize;

use crate::domain::RejectCode;

pub use crate::domain::SignalKind;

/// What became of an audited signal, as `Stats::signals` indexes them.
/// `sent` counts signals queued on a stream; the others are final outcomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum SignalOutcome {
    Sent = 0,
    Acked = 1,
    Failed = 2,
    Undeliverable = 3,
    Timeout = 4,
    Refused = 5,
}

impl SignalOutcome {
    pub const ALL: [SignalOutcome; 6] = [
        SignalOutcome::Sent,
        SignalOutcome::Acked,
        SignalOutcome::Failed,
        SignalOutcome::Undeliverable,
        SignalOutcome::Timeout,
        SignalOutcome::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

crate::domain::named_enum! {
    "snake_case";
    /// Which rows wait for the store writer, as `Stats::store_pending`
    /// indexes them.
    pub enum PendingRows {
        /// Heartbeat and event history (bounded by `storage.max_pending_events`).
        History = 0,
        /// Auth server health transitions (`domain::MAX_PENDING_HEALTH`).
        Health = 1,
        /// Episode changes (compacted past `domain::MAX_PENDING_EPISODES`).
        Episodes = 2,
        /// Current-state rows, one per resource at most.
        State = 3,
    }
}

crate::domain::named_enum! {
    "snake_case";
    /// Where the cluster source is in its loop (`/readyz` says it): what an
    /// operator watching a resync wants to know, and what a test waits on
    /// before moving a paused clock past a session in flight.
    pub enum SourcePhase {
        /// Dialling the cluster and opening the watch.
        Connecting = 0,
        /// The watch is open: waiting for INIT, then listing every kind.
        Resyncing = 1,
        /// Listed, and following the stream.
        Following = 2,
        /// The last session failed; waiting out the backoff.
        Retrying = 3,
    }
}

/// The file descriptor plan made at start (`app::fds`): the limits and the
/// connection caps in force, for the log, `/readyz` and the tests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Descriptors {
    /// The soft limit now (after raising it), and the hard one; `None`:
    /// unlimited.
    pub soft_limit: Option<u64>,
    pub hard_limit: Option<u64>,
    /// The soft limit Lifeline started with, when it raised it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raised_from: Option<u64>,
    /// The caps in force.
    pub grpc_max_connections: usize,
    pub max_http_connections: usize,
    /// Why a configured cap was lowered, in words; `None`: as configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clamped: Option<String>,
}

#[derive(Default, Debug)]
pub struct Stats {
    /// Why the cluster source's last session failed, until one reaches
    /// ready again (`/readyz` shows it).
    pub source_error: std::sync::Mutex<Option<String>>,
    /// The cluster source's [`SourcePhase`], as its index.
    pub source_phase: std::sync::atomic::AtomicU8,
    /// Kinds the source asked for that the cluster refused, as of its
    /// last session.
    pub unwatched: std::sync::Mutex<Vec<Unwatched>>,
    /// Upstream events applied (PUT/DELETE, after validation).
    pub events_applied: AtomicU64,
    /// The same by kind (`Kind::index`) and operation (`Op`).
    pub ingested: [[AtomicU64; 2]; 4],
    /// Stream events (after INIT) handed to the fleet, valid or not.
    pub stream_events: AtomicU64,
    /// The same, for the current watch session only.
    pub session_events: AtomicU64,
    /// PUTs whose `expires` moved.
    pub heartbeats: AtomicU64,
    /// Rejected inputs, by code (indexed by `RejectCode as usize`).
    pub rejected: [AtomicU64; RejectCode::COUNT],
    /// Watch streams opened (each a new generation).
    pub watch_generations: AtomicU64,
    /// Watch streams lost (error or end).
    pub watch_failures: AtomicU64,
    /// Health stream failures (any auth server).
    pub health_failures: AtomicU64,
    /// History rows committed to SQLite.
    pub store_events_committed: AtomicU64,
    /// History rows dropped because SQLite fell too far behind.
    pub store_events_dropped: AtomicU64,
    /// Write transactions committed.
    pub store_batches: AtomicU64,
    /// Write transactions that failed (and were retried or dropped).
    pub store_errors: AtomicU64,
    /// Batches not written because the lease they were made under had
    /// moved on (another replica leads).
    pub store_batches_fenced: AtomicU64,
    /// Rows the database refused for what they hold (a poison row): each
    /// recorded as rejected while the rest of its batch committed.
    pub store_rows_refused: AtomicU64,
    /// Signals the leader recorded as timed out because no replica
    /// answered for them (the one holding the agent died).
    pub signals_swept: AtomicU64,
    /// Signals delivered on a replica's own search after it could not
    /// hear for a while (the notification that woke it was lost).
    pub signals_caught_up: AtomicU64,
    /// Times the listening connection missed its own probe and was made
    /// again (it had died without saying so).
    pub listen_probes_lost: AtomicU64,
    /// Expiry timers that fired.
    pub timers_fired: AtomicU64,
    /// Agent state changes.
    pub state_changes: AtomicU64,
    /// Discovery messages sent, full and delta, and their encoded bytes.
    pub discovery_full: AtomicU64,
    pub discovery_delta: AtomicU64,
    pub discovery_bytes_full: AtomicU64,
    pub discovery_bytes_delta: AtomicU64,
    /// Audited signals by kind (`SignalKind`) and outcome (`SignalOutcome`).
    pub signals: [[AtomicU64; 6]; 2],
    /// Signal audit updates dropped because SQLite fell behind.
    pub signal_updates_dropped: AtomicU64,
    /// Agent messages refused (bad Hello, bad report, unknown ack).
    pub agent_messages_rejected: AtomicU64,
    /// HTTP requests refused: no or bad credentials (401), a missing role
    /// (403), a manual reconnect too soon (429).
    pub http_unauthorized: AtomicU64,
    pub http_forbidden: AtomicU64,
    pub http_rate_limited: AtomicU64,
    /// Agent signal streams refused for a missing or wrong join token.
    pub agent_join_refused: AtomicU64,
    /// Virtual probes answered, by kind (grpc, tcp) and result (healthy,
    /// unhealthy, unknown), and refused (target not allowed, bad request).
    pub probes: [[AtomicU64; 3]; 2],
    pub probes_refused: AtomicU64,
    /// Rows waiting in the fleet for room at the store writer, by
    /// [`PendingRows`]: what a database outage holds in memory.
    pub store_pending: [AtomicU64; 4],
    /// The database's clock minus this replica's, microseconds (among
    /// replicas; 0 alone).
    pub clock_offset_us: std::sync::atomic::AtomicI64,
    /// When the cluster identity's client certificate expires, Unix
    /// seconds (0: no identity file), and how often the file was renewed.
    pub cluster_identity_not_after: AtomicU64,
    pub cluster_identity_renewals: AtomicU64,
    /// Services the watch shows that a listing made since does not hold:
    /// hidden from listings by the role's label filters.
    pub listing_hidden: AtomicU64,
    /// Agentless (OpenSSH) nodes in the Teleport cluster, as last seen:
    /// hosts without an agent, skipped.
    pub agentless_nodes: AtomicU64,
    /// gRPC connections open now, and those closed at once for
    /// `server.grpc_max_connections`.
    pub grpc_connections: AtomicU64,
    pub grpc_connections_refused: AtomicU64,
    /// The HTTP listener's connections (API, dashboard, probes, metrics).
    pub http: HeldCounters,
    /// The admin listener's (`server.admin_listen`: probes and metrics).
    pub admin: HeldCounters,
    /// Accepts that failed on Lifeline's own listeners (out of file
    /// descriptors, most often), each followed by a wait.
    pub accept_errors: AtomicU64,
    /// The file descriptor plan, set once at start.
    pub descriptors: std::sync::OnceLock<Descriptors>,
    /// TLS handshakes that failed or timed out, by listener
    /// (`tls::Which`: http, grpc).
    pub tls_handshake_failures: [AtomicU64; 2],
    /// Changed certificate files looked at and loaded, or refused.
    pub tls_reloads_loaded: AtomicU64,
    pub tls_reloads_refused: AtomicU64,
    /// When the served certificate expires, Unix seconds (0: no TLS).
    pub tls_not_after: AtomicU64,
    /// Notifications by channel ([`Channel`]) and outcome
    /// ([`NotifyOutcome`]).
    pub notify: [[AtomicU64; 3]; 2],
    /// Of those dropped, by channel and why ([`DropReason`]).
    pub notify_dropped: [[AtomicU64; 2]; 2],
    /// Latency and size distributions.
    pub hist: Histograms,
}

/// Where a notification goes, as `Stats::notify` indexes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Channel {
    Alertmanager = 0,
    Webhook = 1,
}

/// What became of one notification: accepted, an attempt that failed
/// (retried), or given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum NotifyOutcome {
    Delivered = 0,
    Failed = 1,
    Dropped = 2,
}

/// Why a notification was given up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum DropReason {
    /// Older than the channel's `max_age`, measured from the event's own
    /// time: told late, it would page people about the past.
    TooOld = 0,
    /// Its stored body could not be read.
    Unreadable = 1,
}

/// One HTTP listener's connections: held now, and each way one ended
/// early (`tls::held`).
#[derive(Debug, Default)]
pub struct HeldCounters {
    pub open: AtomicU64,
    /// Refused at accept: at the cap, every held connection serving.
    pub refused: AtomicU64,
    /// Closed to make room at the cap: the one that had held no whole
    /// request for longest.
    pub evicted: AtomicU64,
    /// No byte either way for `http_idle_timeout`.
    pub idle: AtomicU64,
    /// A request not whole (headers and body) by `http_request_timeout`.
    pub request_deadline: AtomicU64,
    /// A request arriving slower than `http_min_rate`.
    pub too_slow: AtomicU64,
}

impl Stats {
    /// Counts one notification.
    pub fn notified(&self, channel: Channel, outcome: NotifyOutcome) {
        self.notify[channel as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one notification given up on, and why.
    pub fn dropped(&self, channel: Channel, why: DropReason) {
        self.notified(channel, NotifyOutcome::Dropped);
        self.notify_dropped[channel as usize][why as usize].fetch_add(1, Ordering::Relaxed);
    }
}

/// The histograms `/metrics` shows, recorded into this instance's own
/// Prometheus recorder (so two Lifelines in one process never mix).
pub struct Histograms {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    /// Condition began (expiry instant, health transition) → agent flagged.
    pub detection: Histogram,
    /// Signal created → agent's ack, by kind (`SignalKind`).
    pub signal: [Histogram; 2],
    /// Rows per SQLite write transaction.
    pub store_batch_rows: Histogram,
    /// One write transaction, begin to commit.
    pub store_commit: Histogram,
}

/// The name of every metric `/metrics` serves, declared once: the
/// exposition, the alert rules and the dashboard all use these, so a
/// rename reaches all three (and a test checks them against a scrape).
pub mod metric {
    pub const AGENTS: &str = "lifeline_agents";
    pub const READ_MODEL_GENERATION: &str = "lifeline_read_model_generation";
    pub const AGENTS_WAITING_FOR_LIVE_PROXY: &str = "lifeline_agents_waiting_for_live_proxy";
    pub const PROXIES: &str = "lifeline_proxies";
    pub const AUTH_SERVERS: &str = "lifeline_auth_servers";
    pub const WATCHER_STATE: &str = "lifeline_watcher_state";
    pub const WATCHER_GENERATION: &str = "lifeline_watcher_generation";
    pub const AGENT_STREAMS: &str = "lifeline_agent_streams";
    pub const SIGNALS_IN_FLIGHT: &str = "lifeline_signals_in_flight";
    pub const STORM_GUARD_PAUSED: &str = "lifeline_storm_guard_paused";
    pub const STORM_GUARD_STRANDED_IN_WINDOW: &str = "lifeline_storm_guard_stranded_in_window";
    pub const AGENTS_RETRYING: &str = "lifeline_agents_retrying";
    pub const LEADER: &str = "lifeline_leader";
    pub const LEADER_TERM: &str = "lifeline_leader_term";
    pub const STORE_FAILING: &str = "lifeline_store_failing";
    pub const TASK_FAILED: &str = "lifeline_task_failed";
    pub const TRACE_SPANS_QUEUED: &str = "lifeline_trace_spans_queued";
    pub const EVENTS_INGESTED_TOTAL: &str = "lifeline_events_ingested_total";
    pub const EVENTS_REJECTED_TOTAL: &str = "lifeline_events_rejected_total";
    pub const HEARTBEATS_TOTAL: &str = "lifeline_heartbeats_total";
    pub const WATCH_STREAMS_OPENED_TOTAL: &str = "lifeline_watch_streams_opened_total";
    pub const WATCH_STREAM_FAILURES_TOTAL: &str = "lifeline_watch_stream_failures_total";
    pub const HEALTH_STREAM_FAILURES_TOTAL: &str = "lifeline_health_stream_failures_total";
    pub const TIMERS_FIRED_TOTAL: &str = "lifeline_timers_fired_total";
    pub const AGENT_STATE_CHANGES_TOTAL: &str = "lifeline_agent_state_changes_total";
    pub const SIGNAL_AUDIT_UPDATES_DROPPED_TOTAL: &str =
        "lifeline_signal_audit_updates_dropped_total";
    pub const AGENT_MESSAGES_REJECTED_TOTAL: &str = "lifeline_agent_messages_rejected_total";
    pub const AGENT_JOIN_REFUSED_TOTAL: &str = "lifeline_agent_join_refused_total";
    pub const PROBES_REFUSED_TOTAL: &str = "lifeline_probes_refused_total";
    pub const STORE_BATCHES_TOTAL: &str = "lifeline_store_batches_total";
    pub const STORE_ERRORS_TOTAL: &str = "lifeline_store_errors_total";
    pub const STORE_QUERIES_TIMED_OUT_TOTAL: &str = "lifeline_store_queries_timed_out_total";
    pub const STORE_CONNECTIONS_CLOSED_SILENT_TOTAL: &str =
        "lifeline_store_connections_closed_silent_total";
    pub const STORE_BATCHES_FENCED_TOTAL: &str = "lifeline_store_batches_fenced_total";
    pub const STORE_ROWS_REFUSED_TOTAL: &str = "lifeline_store_rows_refused_total";
    pub const SIGNALS_SWEPT_TOTAL: &str = "lifeline_signals_swept_total";
    pub const SIGNALS_CAUGHT_UP_TOTAL: &str = "lifeline_signals_caught_up_total";
    pub const LISTEN_PROBES_LOST_TOTAL: &str = "lifeline_listen_probes_lost_total";
    pub const TRACE_SPANS_EXPORTED_TOTAL: &str = "lifeline_trace_spans_exported_total";
    pub const SIGNALS_TOTAL: &str = "lifeline_signals_total";
    pub const DISCOVERY_MESSAGES_TOTAL: &str = "lifeline_discovery_messages_total";
    pub const DISCOVERY_BYTES_TOTAL: &str = "lifeline_discovery_bytes_total";
    pub const HTTP_REFUSED_TOTAL: &str = "lifeline_http_refused_total";
    pub const PROBES_TOTAL: &str = "lifeline_probes_total";
    pub const STORE_HISTORY_ROWS_TOTAL: &str = "lifeline_store_history_rows_total";
    pub const TRACE_SPANS_DROPPED_TOTAL: &str = "lifeline_trace_spans_dropped_total";
    pub const STORE_PENDING_ROWS: &str = "lifeline_store_pending_rows";
    pub const CLUSTER_IDENTITY_EXPIRY: &str = "lifeline_cluster_identity_expiry_timestamp_seconds";
    pub const CLUSTER_IDENTITY_RENEWALS_TOTAL: &str = "lifeline_cluster_identity_renewals_total";
    pub const CLOCK_OFFSET_SECONDS: &str = "lifeline_clock_offset_seconds";
    pub const GRPC_CONNECTIONS: &str = "lifeline_grpc_connections";
    pub const GRPC_CONNECTIONS_REFUSED_TOTAL: &str = "lifeline_grpc_connections_refused_total";
    pub const HTTP_CONNECTIONS: &str = "lifeline_http_connections";
    pub const ACCEPT_ERRORS_TOTAL: &str = "lifeline_accept_errors_total";
    pub const HTTP_CONNECTIONS_REFUSED_TOTAL: &str = "lifeline_http_connections_refused_total";
    pub const HTTP_CONNECTIONS_CLOSED_TOTAL: &str = "lifeline_http_connections_closed_total";
    pub const ADMIN_CONNECTIONS: &str = "lifeline_admin_connections";
    pub const ADMIN_CONNECTIONS_CLOSED_TOTAL: &str = "lifeline_admin_connections_closed_total";
    pub const TLS_HANDSHAKE_FAILURES_TOTAL: &str = "lifeline_tls_handshake_failures_total";
    pub const TLS_RELOADS_TOTAL: &str = "lifeline_tls_reloads_total";
    pub const NOTIFICATIONS_TOTAL: &str = "lifeline_notifications_total";
    pub const NOTIFICATIONS_DROPPED_TOTAL: &str = "lifeline_notifications_dropped_total";
    pub const TLS_CERTIFICATE_EXPIRY: &str = "lifeline_tls_certificate_expiry_timestamp_seconds";
    // Labelled with resource names, rendered from the read model.
    pub const ROOT_CAUSE_AGENTS: &str = "lifeline_root_cause_agents";
    pub const ROOT_CAUSE_AGE_SECONDS: &str = "lifeline_root_cause_age_seconds";
    pub const AUTH_SERVER_HEALTH: &str = "lifeline_auth_server_health";
    // Histograms, recorded in `Histograms`.
    pub const DETECTION: &str = "lifeline_detection_latency_seconds";
    pub const SIGNAL_LATENCY: &str = "lifeline_signal_latency_seconds";
    pub const STORE_BATCH_ROWS: &str = "lifeline_store_batch_rows";
    pub const STORE_COMMIT: &str = "lifeline_store_commit_seconds";
}

use metric::{DETECTION, SIGNAL_LATENCY, STORE_BATCH_ROWS, STORE_COMMIT};

impl Default for Histograms {
    fn default() -> Self {
        let secs = [
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0,
        ];
        let rows = [1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0];
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &secs)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Full(STORE_BATCH_ROWS.into()), &rows));
        let recorder = match builder {
            Ok(b) => b.build_recorder(),
            // Only an empty bucket list fails; ours are constants.
            Err(_) => PrometheusBuilder::new().build_recorder(),
        };
        let handle = recorder.handle();
        let (detection, signal, store_batch_rows, store_commit) = metrics::with_local_recorder(
            &recorder,
            || {
                metrics::describe_histogram!(
                    DETECTION,
                    metrics::Unit::Seconds,
                    "From the moment an agent's condition began (a proxy's expiry, an auth server's health change) to Lifeline flagging the agent."
                );
                metrics::describe_histogram!(
                    SIGNAL_LATENCY,
                    metrics::Unit::Seconds,
                    "From an audited signal's creation to the agent's ack."
                );
                metrics::describe_histogram!(
                    STORE_BATCH_ROWS,
                    "Rows per SQLite write transaction."
                );
                metrics::describe_histogram!(
                    STORE_COMMIT,
                    metrics::Unit::Seconds,
                    "One SQLite write transaction, begin to commit."
                );
                (
                    metrics::histogram!(DETECTION),
                    std::array::from_fn(
                        |i| metrics::histogram!(SIGNAL_LATENCY, "kind" => SignalKind::ALL[i].as_str()),
                    ),
                    metrics::histogram!(STORE_BATCH_ROWS),
                    metrics::histogram!(STORE_COMMIT),
                )
            },
        );
        Histograms {
            recorder,
            handle,
            detection,
            signal,
            store_batch_rows,
            store_commit,
        }
    }
}

impl std::fmt::Debug for Histograms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Histograms")
    }
}

impl Histograms {
    /// Runs `f` with this instance's recorder as the `metrics` recorder
    /// (for the gauges and counters `/metrics` sets from current state).
    pub fn with_recorder<R>(&self, f: impl FnOnce() -> R) -> R {
        metrics::with_local_recorder(&self.recorder, f)
    }

    /// The Prometheus text exposition of everything recorded.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Folds recorded samples into their buckets, so memory stays bounded
    /// when nobody scrapes.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

impl Stats {
    /// Folds histogram samples into buckets every 5 s until `stop`, even
    /// when nobody scrapes.
    pub fn spawn_upkeep(
        stats: std::sync::Arc<Stats>,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => stats.hist.upkeep(),
                }
            }
        })
    }
}

impl Stats {
    pub fn set_source_error(&self, e: Option<String>) {
        if let Ok(mut g) = self.source_error.lock() {
            *g = e;
        }
    }

    pub fn source_error(&self) -> Option<String> {
        self.source_error.lock().ok().and_then(|g| g.clone())
    }

    pub fn set_source_phase(&self, p: SourcePhase) {
        self.source_phase.store(p as u8, Ordering::SeqCst);
    }

    pub fn source_phase(&self) -> SourcePhase {
        let i = usize::from(self.source_phase.load(Ordering::SeqCst));
        SourcePhase::ALL
            .get(i)
            .copied()
            .unwrap_or(SourcePhase::Connecting)
    }

    pub fn set_unwatched(&self, kinds: Vec<Unwatched>) {
        if let Ok(mut g) = self.unwatched.lock() {
            *g = kinds;
        }
    }

    pub fn unwatched(&self) -> Vec<Unwatched> {
        self.unwatched.lock().map(|g| g.clone()).unwrap_or_default()
    }

    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn signal(&self, kind: SignalKind, outcome: SignalOutcome) {
        Stats::inc(&self.signals[kind as usize][outcome as usize]);
    }

    /// All kinds' count of one outcome.
    pub fn signal_total(&self, outcome: SignalOutcome) -> u64 {
        self.signals
            .iter()
            .map(|k| k[outcome as usize].load(Ordering::Relaxed))
            .sum()
    }

    pub fn reject(&self, code: RejectCode) {
        Stats::inc(&self.rejected[code as usize]);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            events_applied: get(&self.events_applied),
            heartbeats: get(&self.heartbeats),
            rejected: RejectCode::ALL
                .iter()
                .map(|c| (c.as_str(), get(&self.rejected[*c as usize])))
                .filter(|(_, n)| *n > 0)
                .collect(),
            watch_generations: get(&self.watch_generations),
            watch_failures: get(&self.watch_failures),
            health_failures: get(&self.health_failures),
            store_events_committed: get(&self.store_events_committed),
            store_events_dropped: get(&self.store_events_dropped),
            agentless_nodes: get(&self.agentless_nodes),
            unwatched_kinds: self.unwatched(),
            listing_hidden: get(&self.listing_hidden),
            store_batches: get(&self.store_batches),
            store_errors: get(&self.store_errors),
            timers_fired: get(&self.timers_fired),
            state_changes: get(&self.state_changes),
            signals: SignalStatsSnapshot {
                discovery_full: get(&self.discovery_full),
                discovery_delta: get(&self.discovery_delta),
                discovery_bytes: get(&self.discovery_bytes_full) + get(&self.discovery_bytes_delta),
                sent: self.signal_total(SignalOutcome::Sent),
                acked: self.signal_total(SignalOutcome::Acked),
                failed: self.signal_total(SignalOutcome::Failed),
                undeliverable: self.signal_total(SignalOutcome::Undeliverable),
                timeout: self.signal_total(SignalOutcome::Timeout),
                refused: self.signal_total(SignalOutcome::Refused),
                audit_updates_dropped: get(&self.signal_updates_dropped),
                agent_messages_rejected: get(&self.agent_messages_rejected),
            },
        }
    }
}

/// A kind of the cluster Lifeline asked to watch and does not, and why.
#[derive(Debug, Serialize, Clone, PartialEq, Eq, utoipa::ToSchema)]
pub struct Unwatched {
    /// The cluster's own name for it (Teleport: `windows_desktop_service`).
    pub kind: String,
    pub reason: String,
}

#[derive(Debug, Serialize, Clone, utoipa::ToSchema)]
pub struct StatsSnapshot {
    pub events_applied: u64,
    pub heartbeats: u64,
    pub rejected: std::collections::BTreeMap<&'static str, u64>,
    pub watch_generations: u64,
    pub watch_failures: u64,
    pub health_failures: u64,
    pub store_events_committed: u64,
    pub store_events_dropped: u64,
    /// Registered OpenSSH hosts in the Teleport cluster: not agents, not
    /// watched.
    pub agentless_nodes: u64,
    /// Kinds asked for and not watched (refused by the cluster), with why.
    pub unwatched_kinds: Vec<Unwatched>,
    /// Services the watch shows that the listing hides (a role whose
    /// `*_labels` are not `'*': '*'`).
    pub listing_hidden: u64,
    pub store_batches: u64,
    pub store_errors: u64,
    pub timers_fired: u64,
    pub state_changes: u64,
    pub signals: SignalStatsSnapshot,
}

#[derive(Debug, Serialize, Clone, utoipa::ToSchema)]
pub struct SignalStatsSnapshot {
    pub discovery_full: u64,
    pub discovery_delta: u64,
    pub discovery_bytes: u64,
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    pub undeliverable: u64,
    pub timeout: u64,
    /// Refused by the agent's peer without trying (see `Outcome::Refused`).
    pub refused: u64,
    pub audit_updates_dropped: u64,
    pub agent_messages_rejected: u64,
}
