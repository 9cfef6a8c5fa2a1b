//! Rollouts, planned by the cluster's own account: a proxy that leaves by
//! its own delete (Teleport's graceful shutdown) is a departure, not an
//! expiry; a proxy of a group's older generation that expires while a
//! newer one is live is the rollout replacing it. Strandings either
//! causes are planned (`Plan::Rollout`): told as such, not restarted.

use rustc_hash::FxHashMap as HashMap;

use super::Model;
use crate::clock::Ts;
use crate::domain::{Cause, CauseKind, Plan};

/// Departures remembered at most (the oldest are forgotten first).
pub const MAX_DEPARTED: usize = 10_000;

impl Model {
    /// Proxy `name` left by its own delete at `now`.
    pub(super) fn departed_now(&mut self, name: &str, now: Ts) {
        if self.departed.len() >= MAX_DEPARTED {
            if let Some(oldest) = self
                .departed
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(n, _)| n.clone())
            {
                self.departed.remove(&oldest);
            }
        }
        self.departed.insert(name.to_string(), now);
    }

    /// When proxy `name` departed, if it left by its own delete.
    pub(super) fn departed_at(&self, name: &str) -> Option<Ts> {
        self.departed.get(name).copied()
    }

    /// Proxy `name` is back: no longer departed.
    pub(super) fn returned(&mut self, name: &str) {
        self.departed.remove(name);
    }

    /// Reads each group's newest generation with a live proxy again; true
    /// when that changed (every agent not healthy is judged again).
    pub(super) fn refresh_live_generations(&mut self) -> bool {
        // Borrowed names: an expiry's settle allocates nothing unless a
        // group's newest live generation moved.
        let mut now: HashMap<&str, u64> = HashMap::default();
        for p in self.proxies.values().filter(|p| !p.expired) {
            let g = p.server.group_id.as_str();
            if g.is_empty() {
                continue;
            }
            let e = now.entry(g).or_insert(0);
            *e = (*e).max(p.server.group_generation);
        }
        let same = now.len() == self.live_generations.len()
            && now
                .iter()
                .all(|(g, n)| self.live_generations.get(*g) == Some(n));
        if same {
            return false;
        }
        let owned = now.into_iter().map(|(g, n)| (g.to_string(), n)).collect();
        self.live_generations = owned;
        true
    }

    /// Whether `cause` is a rollout's: a departure, or an older
    /// generation's proxy expiring while a newer one of its group is live.
    pub(super) fn rollout(&self, cause: &Cause) -> Option<Plan> {
        match cause.kind {
            CauseKind::ProxyDeparted => Some(Plan::Rollout),
            CauseKind::ProxyExpired => {
                let p = self.proxies.get(&cause.resource)?;
                let newest = self.live_generations.get(&p.server.group_id)?;
                (*newest > p.server.group_generation).then_some(Plan::Rollout)
            }
            _ => None,
        }
    }
}
