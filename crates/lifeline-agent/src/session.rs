//! The `AgentSignals` streams this sidecar holds, one per Lifeline
//! address (replica), each dialled again with backoff (full jitter) when it
//! ends. It says in its Hello that it only restarts, reports what it reads
//! of its agent, and answers a Reconnect with a restart and a CloseTunnel
//! with a refusal. Owns the streams; the restart itself is `restart`'s.

use std::sync::Arc;
use std::time::Duration;

use lifeline_proto::v1 as pb;
use lifeline_proto::v1::agent_signals_client::AgentSignalsClient;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::clock;
use crate::config::{AgentConfig, Loaded};
use crate::restart::{Restarter, Verdict};

/// The first wait before dialling again, and the longest.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
const BACKOFF_CAP: Duration = Duration::from_secs(60);
/// A stream that stayed up this long starts the backoff afresh.
const STABLE: Duration = Duration::from_secs(60);
/// Longest reason or requester kept from a signal.
const MAX_WORDS: usize = 200;
/// Messages waiting to go to Lifeline on one stream.
const OUTBOUND: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("{0}")]
    Address(String),
    #[error("{0}")]
    Credentials(#[from] crate::config::ConfigError),
    #[error("cannot connect: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("Lifeline refused the stream: {}", .0.message())]
    Refused(tonic::Status),
    #[error("the stream ended: {}", .0.message())]
    Ended(tonic::Status),
    #[error("Lifeline closed the stream")]
    Closed,
}

/// Holds a stream to every configured address for this host until
/// `stop` (a StatefulSet's pods are `pods`'s: see [`crate::run`]).
pub async fn run(cfg: AgentConfig, stop: CancellationToken) {
    let cfg = Arc::new(cfg);
    let restarter = Arc::new(Restarter::new(&cfg));
    info!(
        host = %cfg.host_id,
        lifeline = ?cfg.lifeline,
        method = %restarter.method(),
        dry_run = cfg.dry_run,
        "lifeline-agent started"
    );
    hold_all(cfg, restarter, stop).await;
}

/// Holds a stream to every configured address for the agent `cfg.host_id`,
/// restarted by `restarter`, until `stop`.
pub async fn hold_all(cfg: Arc<AgentConfig>, restarter: Arc<Restarter>, stop: CancellationToken) {
    let mut tasks = Vec::new();
    for addr in cfg.lifeline.clone() {
        let span = info_span!("agent.stream", lifeline = %addr);
        tasks.push(tokio::spawn(
            hold(addr, cfg.clone(), restarter.clone(), stop.clone()).instrument(span),
        ));
    }
    for t in tasks {
        let _ = t.await;
    }
}

fn backoff(attempt: u32) -> Duration {
    clock::backoff(BACKOFF_BASE, BACKOFF_CAP, attempt)
}

async fn hold(
    addr: String,
    cfg: Arc<AgentConfig>,
    restarter: Arc<Restarter>,
    stop: CancellationToken,
) {
    let mut attempt = 0u32;
    loop {
        let began = clock::instant();
        let result = tokio::select! {
            _ = stop.cancelled() => return,
            r = session(&addr, &cfg, &restarter, &stop) => r,
        };
        match result {
            Ok(()) => return,
            Err(e) => warn!(error = %e, "signal stream down; dialling again"),
        }
        if clock::since(began) >= STABLE {
            attempt = 0;
        }
        let wait = backoff(attempt);
        attempt = attempt.saturating_add(1);
        debug!(?wait, attempt, "next dial");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The channel to one Lifeline address, with TLS as configured: `creds`
/// as read for this dial.
pub fn endpoint(addr: &str, creds: &Loaded) -> Result<Endpoint, SessionError> {
    let mut ep = Endpoint::from_shared(addr.to_string())
        .map_err(|e| SessionError::Address(format!("{addr:?}: {e}")))?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if addr.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        if let Some(ca) = &creds.ca_pem {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = &creds.client_identity {
            tls = tls.identity(Identity::from_pem(cert, key));
        }
        ep = ep.tls_config(tls)?;
    }
    Ok(ep)
}

/// What the sidecar tells Lifeline of its agent.
/// Every stream reports at `report_interval`: a look younger than half of
/// it is shared rather than taken again.
async fn report(restarter: &Restarter, every: Duration) -> pb::AgentMessage {
    let seen = restarter.recent_look(every / 2).await;
    let last = restarter.last();
    pb::AgentMessage::report(pb::AgentReport {
        status: seen.status,
        pid: seen.pid.unwrap_or(0),
        last_restart: last.at.map(prost_types::Timestamp::from),
        last_restart_ready: last
            .ready_after
            .and_then(|d| prost_types::Duration::try_from(d).ok()),
    })
}

/// Opens one stream and lets it go: whether this address, TLS and join
/// token let this sidecar in (`lifeline-agent --check` and the tests).
pub async fn once(addr: &str, cfg: &AgentConfig) -> Result<(), SessionError> {
    let restarter = Restarter::new(cfg);
    let (_tx, _inbound) = open(addr, cfg, &restarter).await?;
    Ok(())
}

type Opened = (mpsc::Sender<pb::AgentMessage>, tonic::Streaming<pb::Signal>);

/// Dials, says Hello and a first report, and opens the stream.
async fn open(
    addr: &str,
    cfg: &AgentConfig,
    restarter: &Restarter,
) -> Result<Opened, SessionError> {
    // Read at every dial: a rotated token or certificate is taken up by
    // the next stream without restarting the sidecar.
    let creds = cfg.credentials.load()?;
    let channel = endpoint(addr, &creds)?.connect().await?;
    let bearer = creds
        .token
        .as_ref()
        .map(|t| format!("Bearer {t}").parse::<tonic::metadata::AsciiMetadataValue>())
        .transpose()
        .map_err(|_| SessionError::Address("the join token is not valid header text".into()))?;
    let mut client =
        AgentSignalsClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            if let Some(b) = &bearer {
                req.metadata_mut().insert("authorization", b.clone());
            }
            Ok(req)
        });
    let (tx, rx) = mpsc::channel(OUTBOUND);
    let hello = pb::AgentMessage::hello_restart_only(
        &cfg.host_id,
        concat!("lifeline-agent/", env!("CARGO_PKG_VERSION")),
        &restarter.method(),
        restarter.dry_run(),
        restarter.ack_within(),
    )
    .in_cluster(&cfg.cluster);
    let _ = tx.send(hello).await;
    let _ = tx.send(report(restarter, cfg.report_interval).await).await;
    let inbound = client
        .connect(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(SessionError::Refused)?
        .into_inner();
    Ok((tx, inbound))
}

/// One stream, until it ends (an error) or `stop` (`Ok`).
async fn session(
    addr: &str,
    cfg: &AgentConfig,
    restarter: &Arc<Restarter>,
    stop: &CancellationToken,
) -> Result<(), SessionError> {
    let (tx, mut inbound) = open(addr, cfg, restarter).await?;
    info!("signal stream open");
    let mut tick = tokio::time::interval(cfg.report_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tick.tick() => {
                if tx.send(report(restarter, cfg.report_interval).await).await.is_err() {
                    return Err(SessionError::Closed);
                }
                continue;
            }
            m = inbound.message() => m,
        };
        let signal = match msg {
            Ok(Some(s)) => s,
            Ok(None) => return Err(SessionError::Closed),
            Err(status) => return Err(SessionError::Ended(status)),
        };
        let id = signal.id;
        match signal.kind {
            Some(pb::signal::Kind::Reconnect(r)) => {
                let why = if r.reason.is_empty() {
                    "Lifeline asked".to_string()
                } else {
                    crate::printable(&r.reason, MAX_WORDS)
                };
                let asked_by = crate::printable(&r.requested_by, MAX_WORDS);
                info!(id, reason = %why, requested_by = %asked_by, "reconnect asked: restarting the agent");
                let (tx, restarter, every) = (tx.clone(), restarter.clone(), cfg.report_interval);
                // The stream keeps reading (and refusing a second restart)
                // while this one waits for its agent.
                tokio::spawn(
                    async move {
                        let done = restarter.restart(&why).await;
                        let ack = match done.verdict {
                            Verdict::Refused => pb::AgentMessage::refused(id, done.detail),
                            v => pb::AgentMessage::ack(id, v == Verdict::Ready, done.detail),
                        };
                        let _ = tx.send(ack).await;
                        let _ = tx.send(report(&restarter, every).await).await;
                    }
                    .in_current_span(),
                );
            }
            Some(pb::signal::Kind::CloseTunnel(_)) => {
                let detail =
                    "a sidecar closes no single tunnel: it only restarts its agent".to_string();
                let _ = tx.send(pb::AgentMessage::refused(id, detail)).await;
            }
            Some(pb::signal::Kind::Discovery(_)) | None => {}
        }
    }
}
