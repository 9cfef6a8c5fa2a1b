//! The discovery board: every proxy's current expiry, versioned, with a
//! bounded log of which proxies changed at which version. The fleet writes
//! it (one writer, inside its actor); every agent stream reads it.
//!
//! A stream remembers only the version it last sent, so a connected agent
//! costs a few bytes here however far behind it falls: its delta is "every
//! proxy logged after my version", merged by name, and when the log no longer
//! reaches back that far (or the delta would name too many proxies) the
//! stream gets one full Discovery instead.

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use tokio::sync::watch;

use crate::clock::Ts;
use crate::domain::Server;
use crate::proto::to_duration;
use crate::proto::v1 as pb;

#[derive(Clone, Debug)]
struct Entry {
    group_id: String,
    group_generation: u64,
    addr: String,
    expires: Ts,
}

struct Inner {
    proxies: HashMap<Arc<str>, Entry>,
    /// (version, proxy) in version order; at most `backlog` long.
    log: VecDeque<(u64, Arc<str>)>,
    version: u64,
    backlog: usize,
    /// Last time a proxy appeared, vanished, or changed group or generation.
    topology_changed: Ts,
    /// Bumped whenever a proxy turns live: a new one, or a heartbeat after
    /// its expiry.
    came_up: u64,
}

/// What a stream should send next.
#[derive(Debug, Default)]
pub struct Pending {
    pub full: bool,
    pub version: u64,
    pub proxies: Vec<pb::DiscoveredProxy>,
}

pub struct Board {
    inner: RwLock<Inner>,
    notify: watch::Sender<u64>,
    /// `Inner::came_up` as of the last publish: what waits for somewhere
    /// to move an agent to listens here.
    up: watch::Sender<u64>,
}

impl Board {
    pub fn new(backlog: usize, now: Ts) -> Arc<Board> {
        let (notify, _) = watch::channel(0);
        let (up, _) = watch::channel(0);
        Arc::new(Board {
            inner: RwLock::new(Inner {
                proxies: HashMap::default(),
                log: VecDeque::with_capacity(backlog.min(65_536)),
                version: 0,
                backlog: backlog.max(1),
                topology_changed: now,
                came_up: 0,
            }),
            notify,
            up,
        })
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map half-written
        // in a way that matters more than losing discovery altogether.
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a proxy's current record. Only a new expiry (a heartbeat) or
    /// a new address, group or generation makes a delta.
    pub fn put(&self, s: &Server, now: Ts) {
        let mut g = self.write();
        let inner = &mut *g;
        let entry = Entry {
            group_id: s.group_id.clone(),
            group_generation: s.group_generation,
            addr: s.addr.clone(),
            expires: s.expires,
        };
        let (key, was_live): (Arc<str>, bool) = match inner.proxies.get_key_value(s.name.as_str()) {
            Some((k, old)) => {
                let topo = old.group_id != entry.group_id
                    || old.group_generation != entry.group_generation;
                let same = !topo && old.addr == entry.addr && old.expires == entry.expires;
                if same {
                    return;
                }
                if topo {
                    inner.topology_changed = now;
                }
                (k.clone(), old.expires > now)
            }
            None => {
                inner.topology_changed = now;
                (Arc::from(s.name.as_str()), false)
            }
        };
        if !was_live && entry.expires > now {
            inner.came_up += 1;
        }
        inner.proxies.insert(key.clone(), entry);
        inner.version += 1;
        let v = inner.version;
        if inner.log.len() >= inner.backlog {
            inner.log.pop_front();
        }
        inner.log.push_back((v, key));
    }

    /// A proxy is gone. Agents let it lapse by its TTL; nothing is sent.
    pub fn remove(&self, name: &str, now: Ts) {
        let mut g = self.write();
        if g.proxies.remove(name).is_some() {
            g.topology_changed = now;
        }
    }

    /// Replaces the board with a full listing (a resync).
    pub fn replace<'a>(&self, list: impl Iterator<Item = &'a Server>, now: Ts) {
        let mut keep = HashSet::default();
        for s in list {
            keep.insert(s.name.clone());
            self.put(s, now);
        }
        let mut g = self.write();
        let before = g.proxies.len();
        g.proxies.retain(|k, _| keep.contains(&**k));
        if g.proxies.len() != before {
            g.topology_changed = now;
        }
    }

    /// Wakes the streams if anything changed since the last publish. Called
    /// once per fleet pass, so heartbeats arriving together are one message.
    pub fn publish(&self) {
        let (v, up) = {
            let g = self.read();
            (g.version, g.came_up)
        };
        for (tx, v) in [(&self.notify, v), (&self.up, up)] {
            tx.send_if_modified(|cur| {
                let changed = *cur != v;
                *cur = v;
                changed
            });
        }
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.notify.subscribe()
    }

    /// Changes (once per fleet pass) whenever a proxy turned live: a new
    /// one, or one heartbeating again after its expiry.
    pub fn subscribe_proxy_up(&self) -> watch::Receiver<u64> {
        self.up.subscribe()
    }

    pub fn version(&self) -> u64 {
        self.read().version
    }

    pub fn topology_changed(&self) -> Ts {
        self.read().topology_changed
    }

    pub fn proxy_count(&self) -> usize {
        self.read().proxies.len()
    }

    fn proto(name: &str, e: &Entry, now: Ts) -> pb::DiscoveredProxy {
        let ttl = if e.expires > now {
            e.expires.since(now)
        } else {
            Duration::ZERO
        };
        pb::DiscoveredProxy {
            name: name.to_string(),
            group_id: e.group_id.clone(),
            group_generation: e.group_generation,
            ttl: Some(to_duration(ttl)),
            addr: e.addr.clone(),
        }
    }

    /// Every unexpired proxy, each with the time it has left.
    pub fn full(&self, now: Ts) -> Pending {
        let g = self.read();
        let mut proxies: Vec<_> = g
            .proxies
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(n, e)| Self::proto(n, e, now))
            .collect();
        proxies.sort_by(|a, b| a.name.cmp(&b.name));
        Pending {
            full: true,
            version: g.version,
            proxies,
        }
    }

    /// What a stream that last sent `since` should get now: the proxies
    /// that changed after it, or a full Discovery when the log no longer
    /// reaches back that far or the delta would name more than `max`.
    pub fn delta(&self, since: u64, now: Ts, max: usize) -> Pending {
        let g = self.read();
        if since >= g.version {
            return Pending {
                full: false,
                version: g.version,
                proxies: Vec::new(),
            };
        }
        let reaches = g.log.front().is_some_and(|(v, _)| *v <= since + 1);
        if !reaches {
            drop(g);
            return self.full(now);
        }
        let start = g.log.partition_point(|(v, _)| *v <= since);
        let mut seen: HashSet<&str> = HashSet::default();
        let mut proxies = Vec::new();
        for (_, name) in g.log.range(start..) {
            if !seen.insert(name) {
                continue;
            }
            if seen.len() > max {
                drop(seen);
                drop(g);
                return self.full(now);
            }
            if let Some(e) = g.proxies.get(name).filter(|e| e.expires > now) {
                proxies.push(Self::proto(name, e, now));
            }
        }
        proxies.sort_by(|a, b| a.name.cmp(&b.name));
        Pending {
            full: false,
            version: g.version,
            proxies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{test_server, Kind};

    fn proxy(name: &str, expires: i64) -> Server {
        test_server(Kind::Proxy, name, Ts(expires))
    }

    #[test]
    fn delta_names_each_changed_proxy_once_with_its_remaining_ttl() {
        let b = Board::new(16, Ts(0));
        b.put(&proxy("p1", 10_000_000), Ts(0));
        b.put(&proxy("p2", 10_000_000), Ts(0));
        let v = b.version();
        b.put(&proxy("p1", 20_000_000), Ts(0));
        b.put(&proxy("p1", 30_000_000), Ts(0));
        // Same expiry again: not a heartbeat, no delta.
        b.put(&proxy("p2", 10_000_000), Ts(0));
        let d = b.delta(v, Ts(5_000_000), 100);
        assert!(!d.full);
        assert_eq!(d.proxies.len(), 1);
        assert_eq!(d.proxies[0].name, "p1");
        assert_eq!(d.proxies[0].ttl.unwrap().seconds, 25);
        assert!(b.delta(d.version, Ts(5_000_000), 100).proxies.is_empty());
    }

    #[test]
    fn a_stream_behind_the_log_or_past_the_bound_gets_a_full_list() {
        let b = Board::new(16, Ts(0));
        for i in 0..40 {
            b.put(&proxy(&format!("p{i}"), 10_000_000 + i), Ts(0));
        }
        let d = b.delta(1, Ts(0), 100);
        assert!(d.full, "log no longer reaches version 1");
        assert_eq!(d.proxies.len(), 40);
        let v = b.version();
        for i in 0..5 {
            b.put(&proxy(&format!("p{i}"), 20_000_000), Ts(0));
        }
        assert!(b.delta(v, Ts(0), 4).full, "5 changed > bound 4");
        assert!(!b.delta(v, Ts(0), 5).full);
    }

    #[test]
    fn a_proxy_turning_live_is_announced_once_per_publish() {
        let b = Board::new(16, Ts(0));
        let mut up = b.subscribe_proxy_up();
        b.put(&proxy("p1", 10), Ts(0));
        b.publish();
        assert!(up.has_changed().unwrap(), "a new live proxy");
        up.mark_unchanged();
        b.put(&proxy("p1", 20), Ts(5));
        b.publish();
        assert!(!up.has_changed().unwrap(), "a heartbeat of a live proxy");
        // Expired at 30, heartbeats again: live again.
        b.put(&proxy("p1", 100), Ts(30));
        b.publish();
        assert!(up.has_changed().unwrap(), "back from its expiry");
        up.mark_unchanged();
        // A new proxy that arrives already expired is not somewhere to go.
        b.put(&proxy("p2", 10), Ts(40));
        b.publish();
        assert!(!up.has_changed().unwrap());
    }

    #[test]
    fn expired_proxies_are_not_announced() {
        let b = Board::new(16, Ts(0));
        b.put(&proxy("p1", 10), Ts(0));
        b.put(&proxy("p2", 1_000), Ts(0));
        let f = b.full(Ts(100));
        assert_eq!(f.proxies.len(), 1);
        assert_eq!(f.proxies[0].name, "p2");
    }
}
