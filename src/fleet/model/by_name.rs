//! A hash table of entries found by the name each entry holds, the
//! entries kept dense.
//!
//! A `HashMap<String, Entry>` keeps every name twice (the key, and inside
//! the entry: an agent's server, a tunnel's record), and keeps the entries
//! in its buckets: a table just past a doubling is half empty, so at a
//! million agents each 352-byte agent entry cost about 730 bytes and each
//! tunnel entry about 230. Here the entries sit in one vector, in no
//! order and without gaps, and the hash table holds only their positions,
//! hashed by the name each entry carries. A removal moves the last entry
//! into the hole and re-points its one index slot.
//!
//! Owns: the entries and their index. Must not touch: what an entry is.
//! An entry's name must not change while it is held (the callers replace
//! an entry by one of the same name, never rename one in place).

use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::FxBuildHasher;

/// An entry that carries the name it is found by.
pub trait Named {
    fn name(&self) -> &str;
}

pub struct ByName<V> {
    entries: Vec<V>,
    /// Positions in `entries`, hashed by the entry's name.
    index: HashTable<usize>,
}

impl<V> Default for ByName<V> {
    fn default() -> Self {
        ByName {
            entries: Vec::new(),
            index: HashTable::new(),
        }
    }
}

fn hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

impl<V: Named> ByName<V> {
    fn position(&self, name: &str) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash(name), |&i| {
                entries.get(i).is_some_and(|e| e.name() == name)
            })
            .copied()
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        self.position(name).and_then(|i| self.entries.get(i))
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.position(name).and_then(|i| self.entries.get_mut(i))
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_some()
    }

    /// Adds `v`, or replaces the entry of its name; returns the one replaced.
    pub fn insert(&mut self, v: V) -> Option<V> {
        let ByName { entries, index } = self;
        let found = index.entry(
            hash(v.name()),
            |&i| entries.get(i).is_some_and(|e| e.name() == v.name()),
            |&i| entries.get(i).map_or(0, |e| hash(e.name())),
        );
        match found {
            Entry::Occupied(o) => entries.get_mut(*o.get()).map(|e| std::mem::replace(e, v)),
            Entry::Vacant(slot) => {
                slot.insert(entries.len());
                entries.push(v);
                None
            }
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<V> {
        let i = self.position(name)?;
        self.take_at(i)
    }

    /// The entry of `name` and its place in the storage order.
    pub fn get_full_mut(&mut self, name: &str) -> Option<(usize, &mut V)> {
        let i = self.position(name)?;
        self.entries.get_mut(i).map(|e| (i, e))
    }

    /// Removes the entries at the places of the storage order that `gone`
    /// picks, and returns them in that order.
    pub fn remove_at(&mut self, gone: impl Fn(usize) -> bool) -> Vec<V> {
        let mut removed = Vec::new();
        // From the last place down: the entry that moves into a hole is
        // then always one that stays, and the places still to be looked
        // at have not moved.
        for i in (0..self.entries.len()).rev() {
            if gone(i) {
                removed.extend(self.take_at(i));
            }
        }
        removed.reverse();
        removed
    }

    /// Takes out the entry at `i`; the last entry moves into the hole.
    fn take_at(&mut self, i: usize) -> Option<V> {
        let ByName { entries, index } = self;
        let name = entries.get(i)?.name();
        if let Ok(slot) = index.find_entry(hash(name), |&j| j == i) {
            slot.remove();
        }
        let last = entries.len().checked_sub(1)?;
        if i != last {
            if let Some(moved) = entries.get(last) {
                if let Some(slot) = index.find_mut(hash(moved.name()), |&j| j == last) {
                    *slot = i;
                }
            }
        }
        Some(entries.swap_remove(i))
    }

    /// Room for `more` entries beyond those held (a resync's listing),
    /// and an eighth more: the first agents to join after a resync then
    /// do not make the vector copy itself whole (352 MB at a million).
    /// Capacity no entry has reached yet is never written, so it costs
    /// address space, not resident memory.
    pub fn reserve(&mut self, more: usize) {
        self.entries.reserve(more.saturating_add(more / 8));
        let entries = &self.entries;
        self.index
            .reserve(more, |&i| entries.get(i).map_or(0, |e| hash(e.name())));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry at `i` of the storage order (`0..len()`).
    pub fn at(&self, i: usize) -> Option<&V> {
        self.entries.get(i)
    }

    /// The name of the entry at `i` of the storage order (`0..len()`),
    /// which only a removal changes.
    pub fn name_at(&self, i: usize) -> Option<&str> {
        self.entries.get(i).map(|e| e.name())
    }

    /// The entries, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter()
    }

    /// The names, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|v| v.name())
    }

    /// (name, entry) pairs, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.entries.iter().map(|v| (v.name(), v))
    }
}

/// For the tests: an entry that must be there, as a map's index reads.
#[cfg(test)]
impl<V: Named> std::ops::Index<&str> for ByName<V> {
    type Output = V;

    fn index(&self, name: &str) -> &V {
        self.get(name).expect("no entry of that name")
    }
}

impl<V> IntoIterator for ByName<V> {
    type Item = V;
    type IntoIter = std::vec::IntoIter<V>;

    /// The entries, in no order.
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct E(String, u32);

    impl Named for E {
        fn name(&self) -> &str {
            &self.0
        }
    }

    fn e(n: &str, v: u32) -> E {
        E(n.to_string(), v)
    }

    #[test]
    fn finds_replaces_and_removes_by_the_name_an_entry_holds() {
        let mut m = ByName::default();
        assert_eq!(m.insert(e("a", 1)), None);
        assert_eq!(m.insert(e("b", 2)), None);
        assert_eq!(m.insert(e("a", 3)), Some(e("a", 1)));
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("a"), Some(&e("a", 3)));
        assert!(m.contains_key("b"));
        assert!(!m.contains_key("c"));
        if let Some(v) = m.get_mut("b") {
            v.1 = 20;
        }
        assert_eq!(m.remove("b"), Some(e("b", 20)));
        assert_eq!(m.remove("b"), None);
        let names: Vec<&str> = m.keys().collect();
        assert_eq!(names, vec!["a"]);
    }

    #[test]
    fn holds_many_through_growth() {
        let mut m = ByName::default();
        m.reserve(10);
        for i in 0..10_000 {
            m.insert(e(&format!("n{i}"), i));
        }
        assert_eq!(m.len(), 10_000);
        assert!((0..10_000).all(|i| m.get(&format!("n{i}")).map(|v| v.1) == Some(i)));
        for i in (0..10_000).step_by(2) {
            assert!(m.remove(&format!("n{i}")).is_some());
        }
        assert_eq!(m.len(), 5_000);
        assert_eq!(m.values().map(|v| v.1 % 2).sum::<u32>(), 5_000);
        // Every entry moved by a removal is still found at its new place.
        assert!((1..10_000)
            .step_by(2)
            .all(|i| m.get(&format!("n{i}")).map(|v| v.1) == Some(i)));
        assert!((0..10_000)
            .step_by(2)
            .all(|i| !m.contains_key(&format!("n{i}"))));
    }

    #[test]
    fn removes_the_places_picked_and_finds_the_rest() {
        let mut m = ByName::default();
        for i in 0..1_000 {
            m.insert(e(&format!("n{i}"), i));
        }
        assert_eq!(m.get_full_mut("n7").map(|(i, _)| i), Some(7));
        // Every third place, the first and the last among them.
        let removed = m.remove_at(|i| i % 3 == 0 || i == 999);
        assert_eq!(removed.len(), 334);
        let names: Vec<u32> = removed.iter().map(|v| v.1).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "in the storage order");
        assert_eq!(m.len(), 666);
        for i in 0..1_000u32 {
            let gone = i % 3 == 0 || i == 999;
            let held = m.get_full_mut(&format!("n{i}")).map(|(p, v)| (p, v.1));
            match held {
                Some((p, v)) => {
                    assert!(!gone, "n{i} was removed");
                    assert_eq!(v, i);
                    assert_eq!(m.name_at(p), Some(format!("n{i}").as_str()));
                }
                None => assert!(gone, "n{i} was kept"),
            }
        }
        assert!(m.remove_at(|_| true).len() == 666 && m.is_empty());
    }

    #[test]
    fn removing_the_last_and_the_only_entry() {
        let mut m = ByName::default();
        m.insert(e("a", 1));
        m.insert(e("b", 2));
        assert_eq!(m.remove("b"), Some(e("b", 2)));
        assert_eq!(m.get("a"), Some(&e("a", 1)));
        assert_eq!(m.remove("a"), Some(e("a", 1)));
        assert_eq!(m.len(), 0);
        assert_eq!(m.remove("a"), None);
        m.insert(e("c", 3));
        assert_eq!(m.get("c"), Some(&e("c", 3)));
        let all: Vec<E> = m.into_iter().collect();
        assert_eq!(all, vec![e("c", 3)]);
    }
}
