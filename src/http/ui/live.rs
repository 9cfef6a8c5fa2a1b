//! The dashboard's live streams (Server-Sent Events): the overview's
//! rendered fragment at `/live/overview`, and `/live/changes`, which tells
//! every other live page that the fleet's state changed so it fetches its
//! live regions again.
//!
//! One broadcaster renders the overview's live fragment once a second, and
//! only while someone is watching; every open overview receives the same
//! bytes through a `watch` channel, so a hundred open dashboards cost one
//! render a second, and a slow browser only ever skips to the newest
//! fragment (nothing queues). Streams are capped; each ends on shutdown.
//! The fragment carries no per-browser data (no CSRF tokens); it is
//! rendered twice, for those signed in and those not (who are shown no
//! action they cannot take), and each stream gets its caller's.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use askama::Template;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use futures::StreamExt;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::WatchStream;
use tracing::{debug, warn, Instrument};

use super::pages::{overview_model, OverviewLive};
use super::UiError;
use crate::http::caller::{Caller, ClientIp};
use crate::http::error::ApiError;
use crate::http::AppState;
use crate::stats::Stats;

/// How often the shared fragment is re-rendered while watched.
pub const EVERY: Duration = Duration::from_secs(1);

/// The fragment as rendered for each kind of viewer.
#[derive(Clone)]
struct Shown {
    signed_in: Arc<str>,
    signed_out: Arc<str>,
}

impl Shown {
    fn for_caller(&self, signed_in: bool) -> Arc<str> {
        if signed_in {
            self.signed_in.clone()
        } else {
            self.signed_out.clone()
        }
    }
}

pub struct Live {
    tx: watch::Sender<Shown>,
    streams: Arc<Semaphore>,
    max: usize,
    /// Open streams per client IP (entries leave at zero).
    per_ip: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max_per_ip: usize,
}

/// One open stream of one IP; dropping it gives the slot back.
struct IpSlot {
    ip: IpAddr,
    map: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = m.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.ip);
            }
        }
    }
}

impl Live {
    fn take_ip_slot(&self, ip: IpAddr) -> Option<IpSlot> {
        let mut m = self.per_ip.lock().unwrap_or_else(|e| e.into_inner());
        let n = m.entry(ip).or_insert(0);
        if *n >= self.max_per_ip {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            ip,
            map: self.per_ip.clone(),
        })
    }
}

impl Live {
    pub fn new(max_streams: usize, max_per_ip: usize) -> Self {
        Live {
            tx: watch::Sender::new(Shown {
                signed_in: Arc::from(""),
                signed_out: Arc::from(""),
            }),
            streams: Arc::new(Semaphore::new(max_streams)),
            max: max_streams,
            per_ip: Arc::new(Mutex::new(HashMap::new())),
            max_per_ip,
        }
    }
}

async fn render(st: &AppState) -> Result<Shown, UiError> {
    let live = overview_model(st).await?;
    let mut page = OverviewLive {
        live,
        signed_in: true,
    };
    let signed_in = html_of(&page)?;
    page.signed_in = false;
    Ok(Shown {
        signed_in,
        signed_out: html_of(&page)?,
    })
}

fn html_of(page: &OverviewLive) -> Result<Arc<str>, UiError> {
    match page.render() {
        // SSE cannot carry a carriage return, and a name from the network
        // might hold one: as a character reference it means the same.
        Ok(html) if html.contains('\r') => Ok(Arc::from(html.replace('\r', "&#13;"))),
        Ok(html) => Ok(Arc::from(html)),
        Err(e) => {
            warn!(error = %e, "live overview failed to render");
            Err(UiError::from(ApiError::Render))
        }
    }
}

/// The broadcaster; ends with Lifeline.
pub fn spawn(st: AppState) -> JoinHandle<()> {
    let span = tracing::info_span!("ui_live");
    tokio::spawn(
        async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = st.shutdown.cancelled() => break,
                    _ = tick.tick() => {}
                }
                if st.ui.live.tx.receiver_count() == 0 {
                    continue;
                }
                match render(&st).await {
                    Ok(shown) => {
                        st.ui.live.tx.send_replace(shown);
                    }
                    // The fleet is gone: Lifeline is stopping.
                    Err(UiError {
                        err: ApiError::FleetGone,
                        ..
                    }) => break,
                    // A failing or busy database, a busy fleet: the next
                    // tick tries again.
                    Err(UiError {
                        err: e @ (ApiError::Db(_) | ApiError::Busy { .. }),
                        ..
                    }) => warn!(error = %e, "live overview not refreshed"),
                    // A failed render was logged in `render`.
                    Err(_) => {}
                }
            }
            debug!("live overview stopped");
        }
        .instrument(span),
    )
}

/// A stream's slots: one of the process's and one of its client's.
struct Slots {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _ip: IpSlot,
}

/// Takes a stream's slots, or says why there is none (429 for one client
/// holding too many, 503 for the process).
fn slots(st: &AppState, peer: IpAddr) -> Result<Slots, UiError> {
    let Some(ip_slot) = st.ui.live.take_ip_slot(peer) else {
        Stats::inc(&st.stats.http_rate_limited);
        return Err(UiError {
            err: ApiError::TooMany {
                code: "too_many_streams_from_ip",
                message: format!(
                    "{} live streams are already open from {}, the most one client may hold (server.max_live_streams_per_ip); close a dashboard tab",
                    st.ui.live.max_per_ip,
                    peer
                ),
                retry_after: 5,
            },
            json: true,
        });
    };
    let Ok(permit) = st.ui.live.streams.clone().try_acquire_owned() else {
        return Err(UiError {
            err: ApiError::Busy {
                code: "too_many_streams",
                message: format!(
                    "{} live streams are open, the most Lifeline serves; close a dashboard tab or reload later",
                    st.ui.live.max
                ),
            },
            json: true,
        });
    };
    Ok(Slots {
        _permit: permit,
        _ip: ip_slot,
    })
}

/// `GET /live/overview`: a fresh fragment at once, then the shared one as
/// it changes.
pub async fn overview_stream(
    State(st): State<AppState>,
    ClientIp(peer): ClientIp,
    caller: Caller,
) -> Result<impl IntoResponse, UiError> {
    let held = slots(&st, peer)?;
    let signed_in = caller.0.is_some();
    let rx = st.ui.live.tx.subscribe();
    let first = render(&st).await?.for_caller(signed_in);
    let stop = st.shutdown.clone();
    let stream = futures::stream::once(async move { first })
        .chain(WatchStream::from_changes(rx).map(move |s| s.for_caller(signed_in)))
        .map(move |html| {
            let _held = &held;
            Ok::<_, Infallible>(Event::default().event("overview").data(&*html))
        })
        .take_until(stop.cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// `GET /live/changes`: an event (`change`, the read model's time) each
/// time the fleet publishes, at most every 250 ms and only when something
/// changed. Pages with live regions fetch themselves again on it; it
/// carries no state, so it costs nothing to render.
pub async fn changes_stream(
    State(st): State<AppState>,
    ClientIp(peer): ClientIp,
) -> Result<impl IntoResponse, UiError> {
    let held = slots(&st, peer)?;
    let rx = st.fleet.watch_published();
    let stop = st.shutdown.clone();
    let stream = WatchStream::from_changes(rx)
        .map(move |p| {
            let _held = &held;
            Ok::<_, Infallible>(Event::default().event("change").data(p.at().rfc3339()))
        })
        .take_until(stop.cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
