//! A server's labels: a small sorted set of key/value pairs, immutable
//! once built and shared by every copy of the server until they change.
//!
//! Most agents carry none, or the few that Lifeline itself puts on a
//! Teleport host (`agent_label`), whose keys and most values are fixed
//! text: those cost no allocation, and a set is one exact-sized slice
//! rather than a tree node with room for eleven pairs.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, OnceLock};

/// A label's key or value: fixed text Lifeline names, or text it was
/// given.
pub type LabelText = Cow<'static, str>;

/// A server's labels. Their JSON, what the store writes, is made once per
/// set rather than once per write. Every empty set is one shared
/// allocation.
#[derive(Clone)]
pub struct Labels(Arc<LabelSet>);

struct LabelSet {
    /// Sorted by key; keys unique.
    pairs: Box<[(LabelText, LabelText)]>,
    json: OnceLock<String>,
}

static NO_LABELS: LazyLock<Labels> = LazyLock::new(|| {
    Labels(Arc::new(LabelSet {
        pairs: Box::default(),
        json: OnceLock::new(),
    }))
});

impl Default for Labels {
    fn default() -> Labels {
        NO_LABELS.clone()
    }
}

impl Labels {
    /// From pairs in any order; of two pairs with one key, the last wins.
    pub fn from_pairs(mut pairs: Vec<(LabelText, LabelText)>) -> Labels {
        if pairs.is_empty() {
            return Labels::default();
        }
        // Stable: pairs of one key stay in the order given.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut unique: Vec<(LabelText, LabelText)> = Vec::with_capacity(pairs.len());
        for p in pairs {
            match unique.last_mut() {
                Some(last) if last.0 == p.0 => *last = p,
                _ => unique.push(p),
            }
        }
        Labels(Arc::new(LabelSet {
            pairs: unique.into_boxed_slice(),
            json: OnceLock::new(),
        }))
    }

    pub fn new(map: BTreeMap<String, String>) -> Labels {
        map.into_iter().collect()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let pairs = &self.0.pairs;
        pairs
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| pairs[i].1.as_ref())
    }

    /// Every pair, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    pub fn len(&self) -> usize {
        self.0.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.pairs.is_empty()
    }

    /// As a map of owned strings (the API's shape).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// As the store keeps them: a JSON object, keys sorted.
    pub fn json(&self) -> &str {
        self.0.json.get_or_init(|| {
            let map: BTreeMap<&str, &str> = self.iter().collect();
            serde_json::to_string(&map).unwrap_or_else(|_| "{}".into())
        })
    }

    /// Read back from the store; a malformed object reads as no labels.
    pub fn from_json(json: &str) -> Labels {
        Labels::new(serde_json::from_str(json).unwrap_or_default())
    }

    /// True when both are the same shared set.
    pub fn ptr_eq(a: &Labels, b: &Labels) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

/// For tests: the value of `key`, which must be there.
#[cfg(test)]
impl std::ops::Index<&str> for Labels {
    type Output = str;

    fn index(&self, key: &str) -> &str {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no label {key:?}"),
        }
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Labels) -> bool {
        Labels::ptr_eq(self, other) || self.0.pairs == other.0.pairs
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl FromIterator<(String, String)> for Labels {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(iter: I) -> Labels {
        Labels::from_pairs(
            iter.into_iter()
                .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pairs_are_sorted_by_key_and_the_last_of_a_key_wins() {
        let l = owned(&[("b", "2"), ("a", "1"), ("b", "3")]);
        assert_eq!(l.iter().collect::<Vec<_>>(), [("a", "1"), ("b", "3")]);
        assert_eq!(l.get("b"), Some("3"));
        assert_eq!(l.get("c"), None);
        assert_eq!(&l["a"], "1");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn fixed_and_given_text_compare_and_write_alike() {
        let fixed = Labels::from_pairs(vec![(Cow::Borrowed("k"), Cow::Borrowed("v"))]);
        let given = owned(&[("k", "v")]);
        assert_eq!(fixed, given);
        assert_eq!(fixed.json(), r#"{"k":"v"}"#);
        assert_eq!(Labels::from_json(fixed.json()), fixed);
    }

    #[test]
    fn empty_sets_share_one_allocation_and_bad_json_reads_as_none() {
        assert!(Labels::ptr_eq(&Labels::default(), &owned(&[])));
        assert!(Labels::from_json("not json").is_empty());
        assert_eq!(Labels::default().json(), "{}");
    }

    #[test]
    fn a_set_holds_its_pairs_and_reads_back_as_the_apis_map() {
        let l = owned(&[("a", "1"), ("b", "2"), ("c", "3")]);
        assert_eq!(l.0.pairs.len(), 3);
        assert_eq!(
            l.to_map(),
            BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "2".to_string()),
                ("c".to_string(), "3".to_string()),
            ])
        );
    }
}
