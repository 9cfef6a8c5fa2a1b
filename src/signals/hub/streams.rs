//! The stream table: which agent's signal stream is held here, by whom,
//! and whether its peer is a sidecar (restart-only) or only says what it
//! would do (dry run). A second stream never takes a live one's name.
//!
//! Owns: the table, its version (it grows whenever a stream opens or
//! closes) and the count of sidecars in it. Must not touch: what is sent
//! on a stream, or what the other replicas hold.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::proto::v1 as pb;

/// One stream held here.
struct Conn {
    id: u64,
    /// Boxed: a queue's first block holds 32 slots, and 32 signals
    /// inline were ~5 KiB on every stream, most of which never gets one.
    tx: mpsc::Sender<Box<pb::Signal>>,
    /// Where it comes from, for the log when another claims its name.
    peer: String,
    /// A sidecar that restarts its agent instead of moving a tunnel.
    restart_only: bool,
    /// A sidecar that only says what it would do.
    dry_run: bool,
    /// What the sidecar said its restart may take before the ack.
    restart_wait: std::time::Duration,
}

/// What a new stream is.
pub(super) struct Opening<'a> {
    pub tx: mpsc::Sender<Box<pb::Signal>>,
    pub peer: &'a str,
    pub restart_only: bool,
    pub dry_run: bool,
    pub restart_wait: std::time::Duration,
}

/// A stream registered: its id, and whether it took the name from one
/// that had ended.
pub(super) struct Registered {
    pub id: u64,
    pub replaced: bool,
}

/// Why a signal could not be queued on an agent's stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Undeliverable {
    #[error("agent is not connected to Lifeline")]
    NotConnected,
    #[error("agent's signal queue is full ({0} waiting)")]
    QueueFull(usize),
    #[error("agent's stream is closing")]
    Closing,
    #[error("too many signals awaiting an ack")]
    TooManyAwaiting,
}

pub(super) struct Streams {
    conns: Mutex<HashMap<String, Conn>>,
    next: AtomicU64,
    version: AtomicU64,
    sidecars: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Streams {
    pub fn new() -> Streams {
        Streams {
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            version: AtomicU64::new(0),
            sidecars: AtomicUsize::new(0),
        }
    }

    /// Makes `s` the agent's stream, unless another that is still open
    /// holds the name: `Err` with the holder's peer.
    pub fn register(&self, agent: &str, s: Opening<'_>) -> Result<Registered, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut conns = lock(&self.conns);
        if let Some(held) = conns.get(agent).filter(|c| !c.tx.is_closed()) {
            return Err(held.peer.clone());
        }
        let old = conns.insert(
            agent.to_string(),
            Conn {
                id,
                tx: s.tx,
                peer: s.peer.to_string(),
                restart_only: s.restart_only,
                dry_run: s.dry_run,
                restart_wait: s.restart_wait,
            },
        );
        let replaced = old.is_some();
        if old.is_some_and(|c| c.restart_only) {
            self.sidecars.fetch_sub(1, Ordering::Relaxed);
        }
        if s.restart_only {
            self.sidecars.fetch_add(1, Ordering::Relaxed);
        }
        drop(conns);
        self.version.fetch_add(1, Ordering::Release);
        Ok(Registered { id, replaced })
    }

    /// Removes the stream if it is still the agent's current one.
    pub fn unregister(&self, agent: &str, id: u64) -> bool {
        let mut m = lock(&self.conns);
        if m.get(agent).is_some_and(|c| c.id == id) {
            if m.remove(agent).is_some_and(|c| c.restart_only) {
                self.sidecars.fetch_sub(1, Ordering::Relaxed);
            }
            self.version.fetch_add(1, Ordering::Release);
            true
        } else {
            false
        }
    }

    /// Queues `signal` on the agent's stream, without waiting.
    pub fn try_send(&self, agent: &str, signal: pb::Signal) -> Result<(), Undeliverable> {
        let conns = lock(&self.conns);
        let conn = conns.get(agent).ok_or(Undeliverable::NotConnected)?;
        conn.tx.try_send(Box::new(signal)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Undeliverable::QueueFull(conn.tx.max_capacity()),
            mpsc::error::TrySendError::Closed(_) => Undeliverable::Closing,
        })
    }

    pub fn contains(&self, agent: &str) -> bool {
        lock(&self.conns).contains_key(agent)
    }

    /// Whether each of `agents` has a stream here, in order.
    pub fn contains_each<'a>(&self, agents: impl Iterator<Item = &'a str>) -> Vec<bool> {
        let conns = lock(&self.conns);
        agents.map(|a| conns.contains_key(a)).collect()
    }

    pub fn len(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Grows whenever a stream opens or closes.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Sidecars among the streams here.
    pub fn sidecars(&self) -> usize {
        self.sidecars.load(Ordering::Relaxed)
    }

    /// The agents here, each with whether its peer is restart-only.
    pub fn peers(&self) -> HashMap<String, crate::signals::peers::PeerKind> {
        lock(&self.conns)
            .iter()
            .map(|(a, c)| {
                let kind = crate::signals::peers::PeerKind {
                    restart_only: c.restart_only,
                    restart_wait: c.restart_wait,
                };
                (a.clone(), kind)
            })
            .collect()
    }

    /// Of `agents`, those whose stream here is a sidecar's, each with what
    /// it said its restart may take (zero: not said).
    pub fn restart_waits_of(&self, agents: &[String]) -> HashMap<String, std::time::Duration> {
        let conns = lock(&self.conns);
        agents
            .iter()
            .filter_map(|a| {
                let c = conns.get(a.as_str()).filter(|c| c.restart_only)?;
                Some((a.clone(), c.restart_wait))
            })
            .collect()
    }

    /// What the sidecar whose stream for `agent` is here said its restart
    /// may take (zero: none here, or not said).
    pub fn restart_wait_of(&self, agent: &str) -> std::time::Duration {
        lock(&self.conns)
            .get(agent)
            .filter(|c| c.restart_only)
            .map_or(std::time::Duration::ZERO, |c| c.restart_wait)
    }

    /// Sidecars here that only say what they would do.
    pub fn dry_run(&self) -> usize {
        lock(&self.conns).values().filter(|c| c.dry_run).count()
    }

    /// The agents here, in order.
    pub fn agents(&self) -> Vec<String> {
        let mut v: Vec<String> = lock(&self.conns).keys().cloned().collect();
        v.sort();
        v
    }

    /// The agents among `agents` whose stream here is a sidecar's.
    pub fn restart_only_of(&self, agents: &[String]) -> HashSet<String> {
        let conns = lock(&self.conns);
        agents
            .iter()
            .filter(|a| conns.get(a.as_str()).is_some_and(|c| c.restart_only))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(peer: &str, restart_only: bool) -> (Opening<'_>, mpsc::Receiver<Box<pb::Signal>>) {
        let (tx, rx) = mpsc::channel(1);
        (
            Opening {
                tx,
                peer,
                restart_only,
                dry_run: false,
                restart_wait: std::time::Duration::ZERO,
            },
            rx,
        )
    }

    #[test]
    fn a_live_stream_keeps_its_name_and_an_ended_one_gives_it_up() {
        let s = Streams::new();
        let (a, _rx_a) = opening("10.0.0.1:1", true);
        let first = s.register("agent-1", a).expect("registered");
        assert!(!first.replaced);
        let (b, _rx_b) = opening("10.0.0.2:1", true);
        assert_eq!(
            s.register("agent-1", b).err().as_deref(),
            Some("10.0.0.1:1"),
            "a second stream never takes a live one's name"
        );
        assert_eq!(s.sidecars(), 1);
        drop(_rx_a);
        let (c, _rx_c) = opening("10.0.0.3:1", true);
        let second = s.register("agent-1", c).expect("the ended one gave it up");
        assert!(second.replaced);
        assert_eq!(s.sidecars(), 1, "the sidecar is counted once");
        assert!(
            !s.unregister("agent-1", first.id),
            "only the current one is removed"
        );
        assert!(s.unregister("agent-1", second.id));
        assert_eq!((s.len(), s.sidecars()), (0, 0));
    }

    #[test]
    fn the_version_grows_with_every_open_and_close() {
        let s = Streams::new();
        let v0 = s.version();
        let (a, _rx) = opening("p", false);
        let r = s.register("agent-1", a).expect("registered");
        let v1 = s.version();
        assert!(v1 > v0);
        s.unregister("agent-1", r.id);
        assert!(s.version() > v1);
    }

    #[test]
    fn a_signal_is_queued_or_says_why_not() {
        let s = Streams::new();
        let signal = pb::Signal::default;
        assert_eq!(
            s.try_send("nobody", signal()),
            Err(Undeliverable::NotConnected)
        );
        let (a, rx) = opening("p", false);
        s.register("agent-1", a).expect("registered");
        assert_eq!(s.try_send("agent-1", signal()), Ok(()));
        assert_eq!(
            s.try_send("agent-1", signal()),
            Err(Undeliverable::QueueFull(1))
        );
        drop(rx);
        assert_eq!(s.try_send("agent-1", signal()), Err(Undeliverable::Closing));
    }
}
