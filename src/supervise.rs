//! Every long-lived task, tracked. A *critical* task (the fleet, the store
//! writer, the watcher, the hub) that ends before shutdown or panics is a
//! failure of the whole process: it is logged once with its name and why,
//! `/readyz` fails naming it, and [`Tasks::failed`] wakes the CLI, which
//! shuts down and exits non-zero so a process supervisor restarts Lifeline.
//! A task that is not critical and panics is logged, and the rest goes on.
//!
//! [`Runtime`] is what every room is built from: the clock, the counters,
//! the shutdown token and this task set. A room's `start` takes it, spawns
//! its tasks into it and returns its handle.
//!
//! [`drop_elsewhere`] frees a large value (a replaced table of a million
//! entries, each with strings of its own) on a short-lived thread, so the
//! task that replaced it goes on. [`scoped`] and [`joined`] are the one way
//! a large step runs part of its work on a scoped thread of its own.
//!
//! Owns: the join handles. Must not touch: what the tasks do.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::error;

/// Resolves when the watched files are to be read again now
/// ([`Runtime::reread`]); never once nobody can ask any more.
pub async fn reread_asked(rx: &mut watch::Receiver<u64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What every room is built from.
pub struct Runtime {
    pub clock: crate::clock::Clock,
    pub stats: Arc<crate::stats::Stats>,
    pub shutdown: CancellationToken,
    pub tasks: Tasks,
    /// Bumped when the files Lifeline watches (its TLS certificate, the
    /// cluster identity) are to be read again now (`SIGHUP`), not at their
    /// next look.
    pub reread: Arc<watch::Sender<u64>>,
}

impl Runtime {
    pub fn new(clock: crate::clock::Clock, stats: Arc<crate::stats::Stats>) -> Runtime {
        Self::under(clock, stats, CancellationToken::new())
    }

    /// A runtime whose shutdown is `shutdown`.
    pub fn under(
        clock: crate::clock::Clock,
        stats: Arc<crate::stats::Stats>,
        shutdown: CancellationToken,
    ) -> Runtime {
        Runtime {
            clock,
            stats,
            tasks: Tasks::new(shutdown.clone()),
            shutdown,
            reread: Arc::new(watch::channel(0).0),
        }
    }

    /// Spawns a task that may end on its own, named for the log.
    pub fn spawn<F>(&mut self, name: &'static str, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tasks.track(name, tokio::spawn(f));
    }

    /// Spawns a task the process cannot live without.
    pub fn spawn_critical<F>(&mut self, name: &'static str, f: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.tasks.critical(name, tokio::spawn(f));
    }

    /// The process's own upkeep: histogram windows and clock steps.
    pub fn spawn_upkeep(&mut self) {
        let h = crate::stats::Stats::spawn_upkeep(self.stats.clone(), self.shutdown.clone());
        self.tasks.track("histogram upkeep", h);
        let steps = crate::clock::watch_steps(self.clock, self.shutdown.clone());
        self.spawn("clock steps", steps);
    }
}

/// A critical task that stopped.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TaskFailure {
    pub task: &'static str,
    pub why: String,
}

/// The tracked tasks of one Lifeline.
pub struct Tasks {
    handles: Vec<(&'static str, JoinHandle<()>)>,
    failed: Arc<watch::Sender<Option<TaskFailure>>>,
    stop: CancellationToken,
}

impl Tasks {
    /// `stop` is the shutdown token: a task that ends after it fired is
    /// not a failure.
    pub fn new(stop: CancellationToken) -> Tasks {
        Tasks {
            handles: Vec::new(),
            failed: Arc::new(watch::channel(None).0),
            stop,
        }
    }

    /// The first critical failure, if any (for `/readyz`).
    pub fn failure(&self) -> FailureWatch {
        FailureWatch(self.failed.subscribe())
    }

    /// Tracks a task that may end on its own; a panic is logged.
    pub fn track(&mut self, name: &'static str, h: JoinHandle<()>) {
        self.watch(name, false, h);
    }

    /// Tracks a task the process cannot live without.
    pub fn critical(&mut self, name: &'static str, h: JoinHandle<()>) {
        self.watch(name, true, h);
    }

    fn watch(&mut self, name: &'static str, critical: bool, inner: JoinHandle<()>) {
        let (failed, stop) = (self.failed.clone(), self.stop.clone());
        let outer = tokio::spawn(async move {
            let why = match inner.await {
                Ok(()) if stop.is_cancelled() || !critical => return,
                // A start that failed part way drops what it had made, and
                // its tasks end a moment before it cancels the shutdown:
                // not a failure of theirs.
                Ok(()) if ended_by_shutdown(&stop).await => return,
                Ok(()) => "it ended before shutdown".to_string(),
                Err(e) if e.is_panic() => format!("it panicked: {}", panic_text(e.into_panic())),
                Err(e) => format!("it was cancelled: {e}"),
            };
            if !critical {
                error!(task = name, %why, "a background task stopped; Lifeline goes on without it");
                return;
            }
            error!(
                task = name,
                %why,
                "a critical task stopped: Lifeline is not ready and exits so that it can be restarted"
            );
            failed.send_if_modified(|f| {
                if f.is_some() {
                    return false;
                }
                *f = Some(TaskFailure {
                    task: name,
                    why: why.clone(),
                });
                true
            });
        });
        self.handles.push((name, outer));
    }

    /// Waits for every task (after the shutdown token fired), in the order
    /// they were tracked.
    pub async fn join(self) {
        for (name, h) in self.handles {
            if let Err(e) = h.await {
                error!(task = name, error = %e, "task supervisor ended abnormally");
            }
        }
    }
}

/// How long a critical task that ended by itself waits to see whether a
/// shutdown (or a failed start's unwinding) is what ended it.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether `stop` fires within [`SHUTDOWN_GRACE`].
async fn ended_by_shutdown(stop: &CancellationToken) -> bool {
    tokio::time::timeout(SHUTDOWN_GRACE, stop.cancelled())
        .await
        .is_ok()
}

/// Reads and waits for the first critical failure.
#[derive(Clone)]
pub struct FailureWatch(watch::Receiver<Option<TaskFailure>>);

impl FailureWatch {
    pub fn get(&self) -> Option<TaskFailure> {
        self.0.borrow().clone()
    }

    /// Resolves with the first critical failure; never, if none happens.
    pub async fn wait(mut self) -> TaskFailure {
        loop {
            if let Some(f) = self.0.borrow_and_update().clone() {
                return f;
            }
            if self.0.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    }
}

/// `work` on a scoped thread of its own named `name`, or `None` when no
/// thread can be had: the caller then does that work itself.
pub fn scoped<'s, 'e, T: Send + 's>(
    scope: &'s std::thread::Scope<'s, 'e>,
    name: &str,
    work: impl FnOnce() -> T + Send + 's,
) -> Option<std::thread::ScopedJoinHandle<'s, T>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, work)
        .ok()
}

/// What a [`scoped`] thread returned; a panic there goes on here.
pub fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, T>) -> T {
    handle
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// Threads freeing values at once, at most; past that a value is freed
/// where it is given up.
const MAX_DROPPING: usize = 2;

static DROPPING: AtomicUsize = AtomicUsize::new(0);

/// Frees `value` on a thread of its own: freeing a million entries takes
/// a tenth of a second or more, which the caller (an async task, or the
/// fleet between a resync and its verdicts) would otherwise spend. With
/// no thread to be had, or [`MAX_DROPPING`] already freeing, it is freed
/// here.
pub fn drop_elsewhere<T: Send + 'static>(value: T) {
    free_on_a_thread(&DROPPING, value)
}

/// [`drop_elsewhere`] counting its threads in `dropping`.
fn free_on_a_thread<T: Send + 'static>(dropping: &'static AtomicUsize, value: T) {
    if dropping.fetch_add(1, Ordering::AcqRel) >= MAX_DROPPING {
        dropping.fetch_sub(1, Ordering::AcqRel);
        return drop(value);
    }
    /// Counts the thread out however its drop ends.
    struct Out(&'static AtomicUsize);
    impl Drop for Out {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let out = Out(dropping);
    // A refused spawn drops its closure here, the value and `out` with it.
    let _ = std::thread::Builder::new()
        .name("lifeline-free".into())
        .spawn(move || {
            let _out = out;
            drop(value);
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Says on which thread it was dropped.
    struct Telling(std::sync::mpsc::Sender<Option<String>>);

    impl Drop for Telling {
        fn drop(&mut self) {
            let _ = self
                .0
                .send(std::thread::current().name().map(str::to_string));
        }
    }

    #[test]
    fn a_value_given_up_is_freed_on_a_thread_of_its_own_and_each_is_freed() {
        // A count of its own: other tests free values meanwhile.
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        free_on_a_thread(&COUNT, Telling(tx.clone()));
        let first = rx.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(first, Ok(Some("lifeline-free".to_string())));
        // However many at once: past the cap, freed where given up.
        for _ in 0..8 {
            free_on_a_thread(&COUNT, Telling(tx.clone()));
        }
        for _ in 0..8 {
            assert!(rx.recv_timeout(std::time::Duration::from_secs(60)).is_ok());
        }
        drop(tx);
        // Every thread counted out: each has dropped its value (seen
        // above) and ends; a minute at most.
        for _ in 0..600 {
            if COUNT.load(Ordering::Acquire) == 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(COUNT.load(Ordering::Acquire), 0, "a thread not counted out");
    }

    #[tokio::test]
    async fn a_critical_task_that_panics_is_a_named_failure() {
        let stop = CancellationToken::new();
        let mut t = Tasks::new(stop.clone());
        let watch = t.failure();
        t.track("helper", tokio::spawn(async { panic!("helper broke") }));
        t.critical(
            "fleet",
            tokio::spawn(async { panic!("index out of bounds") }),
        );
        let f = watch.clone().wait().await;
        assert_eq!(f.task, "fleet");
        assert!(f.why.contains("panicked: index out of bounds"), "{f:?}");
        assert_eq!(watch.get(), Some(f));
        stop.cancel();
        t.join().await;
    }

    #[tokio::test]
    async fn a_critical_task_ending_early_fails_but_not_after_shutdown() {
        let stop = CancellationToken::new();
        let mut t = Tasks::new(stop.clone());
        let watch = t.failure();
        t.critical("writer", tokio::spawn(async {}));
        let f = watch.clone().wait().await;
        assert_eq!(f.task, "writer");
        assert!(f.why.contains("ended before shutdown"));

        let stop = CancellationToken::new();
        let mut t = Tasks::new(stop.clone());
        let watch = t.failure();
        let s2 = stop.clone();
        t.critical("hub", tokio::spawn(async move { s2.cancelled().await }));
        stop.cancel();
        t.join().await;
        assert_eq!(watch.get(), None, "ending at shutdown is no failure");

        // A failed start drops its tasks a moment before it cancels.
        let stop = CancellationToken::new();
        let mut t = Tasks::new(stop.clone());
        let watch = t.failure();
        t.critical("writer", tokio::spawn(async {}));
        tokio::task::yield_now().await;
        stop.cancel();
        t.join().await;
        assert_eq!(
            watch.get(),
            None,
            "ended as a failed start unwound: no failure"
        );
    }
}
