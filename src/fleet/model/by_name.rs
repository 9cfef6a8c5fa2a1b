//! A hash table of entries found by the name each entry holds.
//!
//! A `HashMap<String, Entry>` keeps every name twice: once as the key and
//! once inside the entry (an agent's server, a tunnel's record), two
//! `String`s and two allocations per entry. At a million agents and two
//! million tunnels that second copy is about 60 bytes per agent and 80
//! per tunnel. Here the table holds the entries alone and hashes the name
//! each one carries.
//!
//! Owns: the table. Must not touch: what an entry is. An entry's name must
//! not change while it is in the table (the callers replace an entry by
//! one of the same name, never rename it).

use std::hash::BuildHasher;

use hashbrown::hash_table::{Entry, HashTable};
use rustc_hash::FxBuildHasher;

/// An entry that carries the name it is found by.
pub trait Named {
    fn name(&self) -> &str;
}

pub struct ByName<V> {
    table: HashTable<V>,
}

impl<V> Default for ByName<V> {
    fn default() -> Self {
        ByName {
            table: HashTable::new(),
        }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for ByName<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.table.iter()).finish()
    }
}

impl<V: Clone> Clone for ByName<V> {
    fn clone(&self) -> Self {
        ByName {
            table: self.table.clone(),
        }
    }
}

fn hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

impl<V: Named> ByName<V> {
    pub fn get(&self, name: &str) -> Option<&V> {
        self.table.find(hash(name), |v| v.name() == name)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        self.table.find_mut(hash(name), |v| v.name() == name)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Adds `v`, or replaces the entry of its name; returns the one replaced.
    pub fn insert(&mut self, v: V) -> Option<V> {
        let h = hash(v.name());
        match self
            .table
            .entry(h, |e| e.name() == v.name(), |e| hash(e.name()))
        {
            Entry::Occupied(mut o) => Some(std::mem::replace(o.get_mut(), v)),
            Entry::Vacant(slot) => {
                slot.insert(v);
                None
            }
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<V> {
        match self.table.find_entry(hash(name), |v| v.name() == name) {
            Ok(o) => Some(o.remove().0),
            Err(_) => None,
        }
    }

    /// Room for `more` entries beyond those held (a resync's listing).
    pub fn reserve(&mut self, more: usize) {
        self.table.reserve(more, |e| hash(e.name()));
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn clear(&mut self) {
        self.table.clear();
    }

    /// The entries, in no order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.table.iter()
    }

    /// The names, in no order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.table.iter().map(|v| v.name())
    }

    /// (name, entry) pairs, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.table.iter().map(|v| (v.name(), v))
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
    type IntoIter = hashbrown::hash_table::IntoIter<V>;

    /// The entries, in no order.
    fn into_iter(self) -> Self::IntoIter {
        self.table.into_iter()
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
        m.clear();
        assert_eq!(m.len(), 0);
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
    }
}
