//! One copy of each proxy name and version the host table holds:
//! thousands of hosts name the same few proxies and run the same few
//! versions, and a copy per host was most of a large fleet's table.

use std::sync::{Arc, LazyLock};

use rustc_hash::FxHashSet;

/// A sorted list of proxy names, shared: a host with one service keeps
/// one list for that service's `ProxyIDs` and for its tunnels, and every
/// agent-mesh host holds the one list of every proxy known.
pub type ProxyList = Arc<[Arc<str>]>;

static NO_PROXIES: LazyLock<ProxyList> = LazyLock::new(|| Arc::from(Vec::new()));

/// The empty list, shared.
pub fn no_proxies() -> ProxyList {
    NO_PROXIES.clone()
}

/// Below this many strings the set is never swept.
const SWEEP_FROM: usize = 1_024;

/// The strings handed out. A string no holder keeps any more is let go
/// when the set has doubled since it was last swept: a host renaming its
/// proxies on every heartbeat cannot grow it without bound.
#[derive(Default)]
pub struct Interned {
    set: FxHashSet<Arc<str>>,
    swept_at: usize,
}

impl Interned {
    /// The one copy of `s`.
    pub fn get(&mut self, s: &str) -> Arc<str> {
        if let Some(k) = self.set.get(s) {
            return k.clone();
        }
        if self.set.len() >= self.swept_at.max(SWEEP_FROM) * 2 {
            self.set.retain(|k| Arc::strong_count(k) > 1);
            self.swept_at = self.set.len();
        }
        let k: Arc<str> = Arc::from(s);
        self.set.insert(k.clone());
        k
    }

    /// The list of these names (sorted and unique, as they come).
    pub fn list<S: AsRef<str>>(&mut self, names: &[S]) -> ProxyList {
        if names.is_empty() {
            return no_proxies();
        }
        names.iter().map(|n| self.get(n.as_ref())).collect()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_of_each_string_and_none_of_those_let_go() {
        let mut i = Interned::default();
        let a = i.list(&["p1", "p2"]);
        let b = i.list(&["p2".to_string()]);
        assert!(Arc::ptr_eq(&a[1], &b[0]), "p2 is kept once");
        assert!(Arc::ptr_eq(&i.list::<&str>(&[]), &no_proxies()));
        assert_eq!(i.len(), 2);

        // Names held by nobody are swept once the set has doubled; the
        // ones still held stay, and are the same copies.
        let held: Vec<Arc<str>> = (0..SWEEP_FROM).map(|n| i.get(&format!("h{n}"))).collect();
        for n in 0..SWEEP_FROM * 2 {
            i.get(&format!("gone{n}"));
        }
        assert!(i.len() < SWEEP_FROM * 3, "swept: {}", i.len());
        assert!(Arc::ptr_eq(&i.get("h7"), &held[7]));
        assert!(Arc::ptr_eq(&i.get("p1"), &a[0]));
    }
}
