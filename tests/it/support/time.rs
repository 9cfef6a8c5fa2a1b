//! Real time while tokio's clock is paused: bounded waits, ticks, and
//! holding the clock still.

use std::time::Duration;

/// Logs to the test's output when `RUST_LOG` is set.
pub fn logs() {
    if let Ok(f) = std::env::var("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(f))
            .with_test_writer()
            .try_init();
    }
}

/// How long a test waits, in real time, for something to cross real sockets.
pub const REAL_WAIT: Duration = Duration::from_secs(20);

/// Keeps tokio from auto-advancing a paused clock: a running blocking task
/// inhibits auto-advance. Dropping the sender ends it.
pub fn hold_clock() -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = rx.recv();
    });
    tx
}

/// Real-time ticks, one per millisecond, from one thread for the whole
/// process: how async code waits in real time while tokio's clock is
/// paused, without a blocking sleep or a thread per wait.
fn real_ticks() -> tokio::sync::watch::Receiver<u64> {
    static TICKS: std::sync::OnceLock<tokio::sync::watch::Receiver<u64>> =
        std::sync::OnceLock::new();
    TICKS
        .get_or_init(|| {
            let (tx, rx) = tokio::sync::watch::channel(0u64);
            std::thread::Builder::new()
                .name("real-time ticks".into())
                .spawn(move || {
                    let mut n = 0u64;
                    // Ends with the process: the static keeps a receiver.
                    while tx.send(n).is_ok() {
                        std::thread::sleep(Duration::from_millis(1));
                        n += 1;
                    }
                })
                .expect("tick thread starts");
            rx
        })
        .clone()
}

/// Waits at least `d` of real time (the tokio clock is paused in tests).
pub async fn real_sleep(d: Duration) {
    let deadline = std::time::Instant::now() + d;
    let mut ticks = real_ticks();
    while std::time::Instant::now() < deadline {
        if ticks.changed().await.is_err() {
            return;
        }
    }
}

/// `f`, or a panic naming `what` after [`REAL_WAIT`] of real time: no
/// wait in a test hangs it.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match real_timeout(REAL_WAIT, f).await {
        Some(v) => v,
        None => panic!("no answer within {REAL_WAIT:?} of real time: {what}"),
    }
}

/// A timeout in real time (the tokio clock is paused in tests).
pub async fn real_timeout<F: std::future::Future>(d: Duration, f: F) -> Option<F::Output> {
    tokio::select! {
        v = f => Some(v),
        _ = real_sleep(d) => None,
    }
}
