//! The expiry schedule: one armed deadline per key, kept in a min-heap. No
//! sweep: the fleet sleeps until the earliest deadline. A heartbeat that moves
//! an expiry later does not touch the heap; when the old deadline fires the
//! fleet re-checks the current expiry and re-arms (DESIGN: "re-check the
//! current expiry"). So the heap holds at most about two entries per key.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap as HashMap;

use crate::clock::Ts;
use crate::domain::Kind;

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerKey {
    /// The expiry of a resource (servers by kind; tunnels by name). The
    /// name is shared by the heap and the armed map, and a re-arm reuses
    /// it: one allocation per timer rather than one per copy.
    Expiry(Kind, std::sync::Arc<str>),
    /// The end of an auth server's UNKNOWN grace.
    AuthGrace(String),
    /// The next minute's count of agents by state (`history`).
    Sample,
    /// A maintenance window starts or ends: the strandings it explains
    /// are judged again.
    Windows,
}

#[derive(Default, Debug)]
pub struct Schedule {
    heap: BinaryHeap<Reverse<(Ts, TimerKey)>>,
    armed: HashMap<TimerKey, Ts>,
}

impl Schedule {
    /// Makes sure `key` fires no later than `at`.
    pub fn arm(&mut self, key: TimerKey, at: Ts) {
        // One lookup: a resync arms a million keys, a cache miss each.
        match self.armed.entry(key) {
            Entry::Occupied(mut armed) => {
                if *armed.get() > at {
                    armed.insert(at);
                    self.heap.push(Reverse((at, armed.key().clone())));
                }
            }
            Entry::Vacant(slot) => {
                self.heap.push(Reverse((at, slot.key().clone())));
                slot.insert(at);
            }
        }
    }

    /// Room for `more` timers: a resync arms a million at once, and a
    /// table that doubles its way there hashes every name again at each
    /// step.
    pub fn reserve(&mut self, more: usize) {
        self.armed.reserve(more);
        self.heap.reserve(more);
    }

    /// The earliest deadline, if any.
    pub fn next(&self) -> Option<Ts> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// Removes and returns the keys whose armed deadline is `<= now`, in
    /// deadline order, with the deadline each was armed for.
    pub fn pop_due(&mut self, now: Ts) -> Vec<(Ts, TimerKey)> {
        let mut due = Vec::new();
        while let Some(Reverse((t, _))) = self.heap.peek() {
            if *t > now {
                break;
            }
            let Some(Reverse((t, key))) = self.heap.pop() else {
                break;
            };
            if self.armed.get(&key) == Some(&t) {
                self.armed.remove(&key);
                due.push((t, key));
            }
        }
        due
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> TimerKey {
        TimerKey::Expiry(Kind::Proxy, n.into())
    }

    #[test]
    fn fires_in_order_and_only_once() {
        let mut s = Schedule::default();
        s.arm(key("b"), Ts(20));
        s.arm(key("a"), Ts(10));
        assert_eq!(s.next(), Some(Ts(10)));
        assert!(s.pop_due(Ts(9)).is_empty());
        assert_eq!(
            s.pop_due(Ts(25)),
            vec![(Ts(10), key("a")), (Ts(20), key("b"))]
        );
        assert!(s.pop_due(Ts(100)).is_empty());
        assert!(s.is_empty());
    }

    #[test]
    fn a_later_arm_keeps_the_earlier_deadline() {
        let mut s = Schedule::default();
        s.arm(key("a"), Ts(10));
        s.arm(key("a"), Ts(30));
        assert_eq!(s.len(), 1);
        assert_eq!(s.pop_due(Ts(10)), vec![(Ts(10), key("a"))]);
    }

    #[test]
    fn an_earlier_arm_supersedes_and_the_old_entry_is_skipped() {
        let mut s = Schedule::default();
        s.arm(key("a"), Ts(30));
        s.arm(key("a"), Ts(10));
        assert_eq!(s.pop_due(Ts(10)), vec![(Ts(10), key("a"))]);
        s.arm(key("a"), Ts(50));
        assert!(
            s.pop_due(Ts(40)).is_empty(),
            "stale entry at 30 must not fire"
        );
        assert_eq!(s.pop_due(Ts(50)), vec![(Ts(50), key("a"))]);
    }
}
