//! Agent names: in order (for paging) and packed in one buffer (for
//! substring search).
//!
//! A search for a substring that few names hold would otherwise walk every
//! name in the ordered set, a cache miss each (a quarter of a second at a
//! million agents). Here every name is also written once into a single
//! byte buffer, one per line, and a search is one SIMD substring scan of
//! that buffer (`memchr::memmem`), whose matches are then sorted. A search
//! that many names match goes the other way: the caller walks the order,
//! where matches are dense, and stops at a page.
//!
//! [`FewNames`] is the set of an agent's tunnel names: two or three, kept
//! in a vector sized to them rather than a tree node sized for eleven
//! (about 230 bytes less per agent).
//!
//! Owns: the sets of names. Must not touch: anything about an agent but
//! its name.

use std::collections::BTreeMap;
use std::ops::RangeBounds;

use memchr::{memchr, memmem, memrchr};

/// Separates names in the buffer. Validation refuses names with control
/// characters, so no name holds one; a match is checked against the set
/// anyway.
const SEP: u8 = b'\n';
/// Compaction waits for at least this many dead bytes.
const MIN_DEAD: usize = 64 * 1024;

#[derive(Debug, Default)]
pub struct AgentNames {
    /// Each name and where it starts in `text`.
    order: BTreeMap<String, usize>,
    /// Every name followed by `SEP`; a removed name is overwritten with
    /// `SEP`s until the next compaction.
    text: Vec<u8>,
    /// Bytes of removed names still in `text`.
    dead: usize,
}

impl AgentNames {
    /// Adds a name; false when it was there.
    pub fn insert(&mut self, name: String) -> bool {
        // One descent of the tree, not a look-up and then an insert.
        match self.order.entry(name) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(v) => {
                let at = self.text.len();
                self.text.extend_from_slice(v.key().as_bytes());
                self.text.push(SEP);
                v.insert(at);
                true
            }
        }
    }

    /// Exactly these names, built at once: a sort (near free when they
    /// come in order, as listings do) and a tree built bottom-up, rather
    /// than a descent of a million-name tree for each. Duplicates count
    /// once.
    pub fn rebuild<'a>(&mut self, names: impl Iterator<Item = &'a str>) {
        let mut names: Vec<&str> = names.collect();
        names.sort_unstable();
        names.dedup();
        let mut text = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        let order = names
            .into_iter()
            .map(|n| {
                let at = text.len();
                text.extend_from_slice(n.as_bytes());
                text.push(SEP);
                (n.to_string(), at)
            })
            .collect();
        self.order = order;
        self.text = text;
        self.dead = 0;
    }

    /// Removes a name; false when it was not there.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(at) = self.order.remove(name) else {
            return false;
        };
        if let Some(bytes) = self.text.get_mut(at..at + name.len()) {
            bytes.fill(SEP);
        }
        self.dead += name.len() + 1;
        if self.dead >= MIN_DEAD && self.dead * 2 > self.text.len() {
            self.compact();
        }
        true
    }

    /// Writes the buffer again from the live names.
    fn compact(&mut self) {
        let mut text = Vec::with_capacity(self.text.len() - self.dead);
        for (name, at) in &mut self.order {
            *at = text.len();
            text.extend_from_slice(name.as_bytes());
            text.push(SEP);
        }
        self.text = text;
        self.dead = 0;
    }

    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.order.keys()
    }

    pub fn range<R: RangeBounds<str>>(&self, r: R) -> impl Iterator<Item = &String> {
        self.order.range::<str, R>(r).map(|(n, _)| n)
    }

    /// The names holding `q` that sort after `after`, in order; `None`
    /// when more than `cap` do (walk [`Self::range`] instead: matches are
    /// then dense enough to fill a page soon).
    pub fn containing(&self, q: &str, after: Option<&str>, cap: usize) -> Option<Vec<&str>> {
        let mut out: Vec<&str> = Vec::new();
        if q.is_empty() || q.as_bytes().contains(&SEP) {
            return if q.is_empty() { None } else { Some(out) };
        }
        let text = self.text.as_slice();
        let finder = memmem::Finder::new(q.as_bytes());
        let mut pos = 0;
        while let Some(i) = text.get(pos..).and_then(|t| finder.find(t)) {
            let at = pos + i;
            let start = memrchr(SEP, &text[..at]).map_or(0, |s| s + 1);
            let end = memchr(SEP, &text[at..]).map_or(text.len(), |e| at + e);
            pos = end + 1;
            let Ok(name) = std::str::from_utf8(&text[start..end]) else {
                continue;
            };
            if after.is_some_and(|a| name <= a) {
                continue;
            }
            if let Some((stored, _)) = self.order.get_key_value(name) {
                out.push(stored.as_str());
                if out.len() > cap {
                    return None;
                }
            }
        }
        out.sort_unstable();
        Some(out)
    }
}

/// A small set of names, sorted, in a vector of exactly its length.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FewNames(Vec<String>);

impl FewNames {
    /// Adds a name; false when it was there.
    pub fn insert(&mut self, name: String) -> bool {
        match self.0.binary_search(&name) {
            Ok(_) => false,
            Err(at) => {
                self.0.reserve_exact(1);
                self.0.insert(at, name);
                true
            }
        }
    }

    /// Removes a name; false when it was not there.
    pub fn remove(&mut self, name: &str) -> bool {
        match self.0.binary_search_by(|n| n.as_str().cmp(name)) {
            Ok(at) => {
                self.0.remove(at);
                self.0.shrink_to_fit();
                true
            }
            Err(_) => false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a FewNames {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl PartialEq<std::collections::BTreeSet<String>> for AgentNames {
    fn eq(&self, other: &std::collections::BTreeSet<String>) -> bool {
        self.order.len() == other.len() && self.order.keys().eq(other.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> AgentNames {
        let mut n = AgentNames::default();
        for s in list {
            n.insert((*s).to_string());
        }
        n
    }

    #[test]
    fn a_rebuild_holds_exactly_the_names_given() {
        let mut n = names(&["old", "web-2"]);
        n.remove("web-2");
        n.rebuild(["web-2", "db-1", "web-2", "cache-web"].into_iter());
        let want: std::collections::BTreeSet<String> =
            ["cache-web", "db-1", "web-2"].map(String::from).into();
        assert_eq!(n, want);
        assert_eq!(
            n.containing("web", None, 100),
            Some(vec!["cache-web", "web-2"])
        );
        assert_eq!(n.containing("old", None, 100), Some(vec![]));
        assert!(n.insert("a".into()));
        assert!(!n.insert("db-1".into()));
        assert_eq!(n.containing("a", None, 100), Some(vec!["a", "cache-web"]));
    }

    #[test]
    fn finds_every_name_holding_the_substring_in_order() {
        let n = names(&["web-2", "db-1", "web-10", "cache-web", "w"]);
        assert_eq!(
            n.containing("web", None, 100),
            Some(vec!["cache-web", "web-10", "web-2"])
        );
        assert_eq!(
            n.containing("web", Some("cache-web"), 100),
            Some(vec!["web-10", "web-2"])
        );
        assert_eq!(n.containing("nothing", None, 100), Some(vec![]));
        assert_eq!(n.containing("w", None, 2), None, "more than the cap");
        assert_eq!(n.containing("a\nb", None, 100), Some(vec![]), "a separator");
        assert_eq!(
            n.containing("", None, 100),
            None,
            "no substring: walk the order"
        );
        // A match at the very start and the very end of the buffer.
        assert_eq!(n.containing("web-2", None, 100), Some(vec!["web-2"]));
        assert_eq!(n.containing("w", Some("web-2"), 100), Some(vec![]));
    }

    #[test]
    fn a_removed_name_is_never_found_and_the_buffer_compacts() {
        let mut n = AgentNames::default();
        for i in 0..20_000 {
            n.insert(format!("agent-{i:05}"));
        }
        for i in 0..15_000 {
            assert!(n.remove(&format!("agent-{i:05}")));
        }
        assert!(!n.remove("agent-00000"));
        assert!(n.text.len() < 20_000 * 12, "compacted");
        assert_eq!(n.containing("agent-0000", None, 100), Some(vec![]));
        assert_eq!(
            n.containing("agent-1500", None, 100),
            Some(
                (15_000..15_010)
                    .map(|i| format!("agent-{i:05}"))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
                    .collect()
            )
        );
        assert_eq!(n.order.len(), 5_000);
        assert!(n.insert("agent-00001".into()));
        assert_eq!(
            n.containing("agent-00001", None, 100),
            Some(vec!["agent-00001"])
        );
        assert!(!n.insert("agent-00001".into()), "once");
    }

    #[test]
    fn few_names_stay_sorted_once_each_and_exactly_sized() {
        let mut f = FewNames::default();
        assert!(f.insert("b".into()));
        assert!(f.insert("a".into()));
        assert!(!f.insert("b".into()), "once");
        assert!(f.insert("c".into()));
        assert_eq!(
            f.iter().map(String::as_str).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(f.0.capacity(), 3);
        assert!(f.remove("b"));
        assert!(!f.remove("b"));
        assert_eq!(f.iter().map(String::as_str).collect::<Vec<_>>(), ["a", "c"]);
        assert!(f.remove("a") && f.remove("c") && f.is_empty());
    }

    #[test]
    fn a_match_across_two_names_is_no_match() {
        let n = names(&["ab", "cd"]);
        assert_eq!(n.containing("bc", None, 100), Some(vec![]));
    }
}
