//! Which Auth instance last saw each host, from `GetInstances`: a vector
//! sorted by host name. Teleport streams instances in name order and a
//! listing holds hosts in name order too, so a walk over the hosts finds
//! each one's Auth at the next position, not by a lookup that misses the
//! processor's cache once per host as a hash table's does at 100 000
//! hosts. Hosts out of order (services listed after the nodes, a new host)
//! are found by binary search.

use std::sync::Arc;

/// Host name → Auth ID, sorted by host name and once each; the Auth IDs
/// are shared strings, a handful among every host.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthOf {
    hosts: Vec<(String, Arc<str>)>,
}

impl AuthOf {
    /// Pairs in any order. Sorted unless they already are (a stream in
    /// name order costs one pass); of a name given twice, the last is kept.
    pub fn new(mut hosts: Vec<(String, Arc<str>)>) -> AuthOf {
        if !hosts.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable: the last of equal names stays last.
            hosts.sort_by(|a, b| a.0.cmp(&b.0));
            hosts.reverse();
            hosts.dedup_by(|a, b| a.0 == b.0);
            hosts.reverse();
        }
        AuthOf { hosts }
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    pub fn get(&self, host: &str) -> Option<&Arc<str>> {
        self.position(host).ok().map(|i| &self.hosts[i].1)
    }

    fn position(&self, host: &str) -> Result<usize, usize> {
        self.hosts.binary_search_by(|(h, _)| h.as_str().cmp(host))
    }

    /// A walk for hosts taken in name order, mostly.
    pub fn walk(&self) -> Walk<'_> {
        Walk { of: self, next: 0 }
    }
}

impl FromIterator<(String, Arc<str>)> for AuthOf {
    fn from_iter<I: IntoIterator<Item = (String, Arc<str>)>>(iter: I) -> AuthOf {
        AuthOf::new(iter.into_iter().collect())
    }
}

/// [`AuthOf::get`] for hosts asked in name order: each is looked for at
/// the position after the last one found first.
pub struct Walk<'a> {
    of: &'a AuthOf,
    next: usize,
}

impl<'a> Walk<'a> {
    pub fn get(&mut self, host: &str) -> Option<&'a Arc<str>> {
        let hosts = &self.of.hosts;
        if let Some((h, auth)) = hosts.get(self.next) {
            if h == host {
                self.next += 1;
                return Some(auth);
            }
        }
        match self.of.position(host) {
            Ok(i) => {
                self.next = i + 1;
                Some(&hosts[i].1)
            }
            Err(i) => {
                self.next = i;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(pairs: &[(&str, &str)]) -> AuthOf {
        pairs
            .iter()
            .map(|(h, a)| (h.to_string(), Arc::from(*a)))
            .collect()
    }

    #[test]
    fn pairs_in_any_order_are_found_and_the_last_of_a_name_wins() {
        let a = of(&[
            ("c", "auth-1"),
            ("a", "auth-2"),
            ("c", "auth-3"),
            ("b", "auth-1"),
        ]);
        assert_eq!(a.len(), 3);
        assert_eq!(a.get("a").map(|s| &**s), Some("auth-2"));
        assert_eq!(a.get("c").map(|s| &**s), Some("auth-3"));
        assert_eq!(a.get("d"), None);
        assert!(AuthOf::default().is_empty());
    }

    #[test]
    fn a_walk_finds_hosts_in_order_out_of_order_and_missing() {
        let a = of(&[("a", "1"), ("b", "2"), ("d", "4"), ("e", "5")]);
        let mut w = a.walk();
        let got: Vec<Option<&str>> = ["a", "b", "c", "d", "a", "e", "z", "e"]
            .iter()
            .map(|h| w.get(h).map(|s| &**s))
            .collect();
        assert_eq!(
            got,
            [
                Some("1"),
                Some("2"),
                None,
                Some("4"),
                Some("1"),
                Some("5"),
                None,
                Some("5")
            ]
        );
    }
}
