//! A webhook receiver: what an on-call tool on the other end of a webhook
//! (or of Alertmanager's `webhook_configs`) is, over real HTTP on
//! loopback. It keeps every request it gets, in order, with the time it
//! came and its headers, and answers as it is told: 200, 500 until a
//! given time, 200 after a random wait, or never (a receiver that hangs).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use lifeline::clock::{Clock, Ts};
use tokio_util::sync::CancellationToken;

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok,
    /// 500 until this time (by the receiver's clock), then 200.
    FailUntil(Ts),
    /// Never answers.
    Hang,
    /// 200, each after a random wait of up to this long (a receiver
    /// under load).
    Slow(std::time::Duration),
}

/// One request as it came.
#[derive(Clone, Debug)]
pub struct Received {
    pub at: Ts,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// What it was answered (none: it hung).
    pub status: Option<u16>,
}

impl Received {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Clone)]
struct Shared {
    clock: Clock,
    answer: Arc<Mutex<Answer>>,
    got: Arc<Mutex<Vec<Received>>>,
    /// The waits of [`Answer::Slow`], from a fixed seed.
    rng: Arc<Mutex<rand::rngs::SmallRng>>,
}

/// A running receiver; it stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    shared: Shared,
    stop: CancellationToken,
}

impl Receiver {
    /// Listens on a free loopback port; every path is taken.
    pub async fn start(clock: Clock) -> std::io::Result<Receiver> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Shared {
            clock,
            answer: Arc::new(Mutex::new(Answer::Ok)),
            got: Arc::default(),
            rng: Arc::new(Mutex::new(rand::SeedableRng::seed_from_u64(0x5eed))),
        };
        let app = Router::new()
            .route("/{*path}", post(take))
            .with_state(shared.clone());
        let stop = CancellationToken::new();
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(until.cancelled_owned())
                .await;
        });
        Ok(Receiver { addr, shared, stop })
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn answer(&self, a: Answer) {
        if let Ok(mut g) = self.shared.answer.lock() {
            *g = a;
        }
    }

    /// Every request so far, in the order they came.
    pub fn got(&self) -> Vec<Received> {
        self.shared
            .got
            .lock()
            .map(|g| g.clone())
            .unwrap_or_default()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn take(
    State(s): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let at = s.clock.now();
    let answer = s.answer.lock().map(|a| *a).unwrap_or(Answer::Ok);
    let status = match answer {
        Answer::Ok => Some(StatusCode::OK),
        Answer::FailUntil(t) if at < t => Some(StatusCode::INTERNAL_SERVER_ERROR),
        Answer::FailUntil(_) => Some(StatusCode::OK),
        Answer::Hang => None,
        Answer::Slow(_) => Some(StatusCode::OK),
    };
    if let Ok(mut g) = s.got.lock() {
        g.push(Received {
            at,
            path: uri.path().to_string(),
            headers,
            body,
            status: status.map(|s| s.as_u16()),
        });
    }
    if let Answer::Slow(max) = answer {
        use rand::Rng;
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        let wait = s
            .rng
            .lock()
            .map(|mut r| r.random_range(0..=ms))
            .unwrap_or(ms);
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
    match status {
        Some(s) => s,
        None => std::future::pending().await,
    }
}
