//! Time: expiry timers and the auth health grace. Nothing expires from
//! stale data; a timer for a resource that heartbeated since is re-armed.

use tracing::{debug, info, warn};

use super::schedule::TimerKey;
use super::Model;
use crate::clock::Ts;
use crate::domain::{AgentState, Health, HistoryEvent, Kind};
use crate::domain::{Census, HistoryEntry};

/// How often the agents are counted by state (`history`'s finest step).
pub const SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Model {
    // ---- time -------------------------------------------------------------

    pub fn next_deadline(&self) -> Option<Ts> {
        self.schedule.next()
    }

    /// Fires every timer that is due. Returns how many fired.
    pub fn fire_due(&mut self) -> usize {
        let now = self.now();
        let due = self.schedule.pop_due(now);
        // The minute's count is not an expiry: not counted as one.
        let n = due
            .iter()
            .filter(|(_, k)| !matches!(k, TimerKey::Sample | TimerKey::Windows))
            .count();
        self.out.tally.timers_fired += n as u64;
        for (_, key) in due {
            match key {
                TimerKey::Expiry(kind, name) => self.expire(kind, name, now),
                TimerKey::AuthGrace(name) => self.grace_over(name, now),
                TimerKey::Sample => self.sample(now),
                TimerKey::Windows => self.windows_turned(now),
            }
        }
        n
    }

    /// Counts the agents by state (planned strandings left out) for the
    /// minute that just ended: the most
    /// at once within it (as the incidents counted them) or at its end,
    /// whichever is more; and arms the next minute's count. Only once the
    /// agents are known: a count made before the first listing would say
    /// nothing true.
    pub(super) fn sample(&mut self, now: Ts) {
        let minute = now.floor_to(SAMPLE_EVERY);
        let (peak_stranded, peak_degraded) = self.incidents.take_peaks();
        if self.classification_enabled() {
            let (mut stranded, mut degraded) = (0u32, 0u32);
            for name in &self.unhealthy {
                // Planned strandings are shown, not counted as harm.
                let unplanned =
                    |a: &&super::AgentEntry| a.cause.as_ref().is_none_or(|c| c.planned.is_none());
                match self.agents.get(name).filter(unplanned).map(|a| a.state) {
                    Some(AgentState::Stranded) => stranded += 1,
                    Some(AgentState::Degraded) => degraded += 1,
                    _ => {}
                }
            }
            self.out.writes.samples.push(Census {
                at: minute.saturating_sub(SAMPLE_EVERY),
                agents: u32::try_from(self.agents.len()).unwrap_or(u32::MAX),
                stranded: stranded.max(peak_stranded),
                degraded: degraded.max(peak_degraded),
            });
        }
        self.schedule
            .arm(TimerKey::Sample, minute.saturating_add(SAMPLE_EVERY));
    }

    pub(super) fn expire(&mut self, kind: Kind, name: std::sync::Arc<str>, now: Ts) {
        // Nothing expires from stale data; the resync re-arms everything.
        if !self.fresh(kind) {
            return;
        }
        let current = match kind {
            Kind::Proxy => self
                .proxies
                .get_mut(&*name)
                .map(|e| (&mut e.expired, e.server.expires)),
            Kind::AuthServer => self
                .auths
                .get_mut(&*name)
                .and_then(|a| a.resource.as_mut())
                .map(|e| (&mut e.expired, e.server.expires)),
            Kind::Agent => self
                .agents
                .get_mut(&name)
                .map(|a| (&mut a.res.expired, a.res.server.expires)),
            Kind::TunnelConnection => self
                .tunnels
                .get_mut(&name)
                .and_then(|t| t.tunnel.expires.map(|e| (&mut t.expired, e))),
        };
        let Some((expired, expires)) = current else {
            return;
        };
        if *expired {
            return;
        }
        if expires > now {
            // It heartbeated since this timer was armed.
            self.schedule.arm(TimerKey::Expiry(kind, name), expires);
            return;
        }
        *expired = true;
        debug!(%kind, %name, "expired");
        self.history(HistoryEntry {
            at: expires,
            kind: kind.into(),
            name: name.to_string(),
            event: HistoryEvent::Expired,
            expires: Some(expires),
            ttl_us: None,
            detail: String::new(),
        });
        match kind {
            Kind::Proxy => self.dirty_proxy_agents(&name),
            Kind::Agent => {
                self.dirty.insert(name.to_string());
            }
            Kind::TunnelConnection => {
                if let Some(t) = self.tunnels.get(&name) {
                    self.dirty.insert(t.tunnel.agent.clone());
                }
            }
            Kind::AuthServer => self.auth_heartbeat_decides(&name),
        }
    }

    /// For an auth server whose health gives no evidence (not served,
    /// never reached), its own heartbeat decides: expired, its agents are
    /// stranded (`auth_expired`); heartbeating again, they are not.
    pub(super) fn auth_heartbeat_decides(&mut self, name: &str) {
        let Some(a) = self.auths.get_mut(name) else {
            return;
        };
        if !a.on_heartbeat() {
            return;
        }
        let expired = a.heartbeat_expired();
        if a.unhealthy == expired {
            return;
        }
        a.unhealthy = expired;
        if expired {
            warn!(auth_server = %name, health = a.health.as_str(), "auth server's heartbeat expired and its health is not watched: its agents count as auth_unhealthy");
        } else {
            info!(auth_server = %name, "auth server heartbeats again");
        }
        self.dirty_auth_agents(name);
    }

    pub(super) fn grace_over(&mut self, name: String, now: Ts) {
        let grace = self.rules.unknown_grace;
        let Some(a) = self.auths.get_mut(&name) else {
            return;
        };
        if a.unhealthy || !matches!(a.health, Health::Unknown | Health::ServiceUnknown) {
            return;
        }
        let end = a.health_since.saturating_add(grace);
        if end > now {
            self.schedule.arm(TimerKey::AuthGrace(name), end);
            return;
        }
        a.unhealthy = true;
        warn!(auth_server = %name, health = a.health.as_str(), "auth health unknown past the grace: its agents count as auth_unhealthy");
        self.dirty_auth_agents(&name);
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::{AgentState, Kind};
    use crate::fleet::model::fixture::*;

    /// Guards the exact expiry instant: not a microsecond before.
    #[test]
    fn a_proxy_expires_at_its_instant_and_strands_its_agents() {
        let mut f = ready(&[("p1", 10)], &["a1"]);
        advance_to(
            &mut f,
            at(10).saturating_sub(std::time::Duration::from_millis(1)),
        );
        assert!(!f.proxies["p1"].expired);
        advance_to(&mut f, at(10));
        assert!(f.proxies["p1"].expired);
        assert_eq!(f.agents["a1"].state, AgentState::Stranded);
        assert_eq!(f.agents["a1"].since, at(10));
    }

    /// Guards Lifeline's own blindness: nothing expires from data whose
    /// stream is lost, and no agent is stranded by it.
    #[test]
    fn stale_data_never_expires() {
        for (what, lose) in [("stream lost", true), ("stream kept", false)] {
            let mut f = ready(&[("p1", 10)], &["a1"]);
            if lose {
                f.watch_down(1, "reset by peer");
                assert_eq!(f.kind(Kind::Proxy).state, crate::fleet::WatchState::Stale);
            }
            advance_to(&mut f, at(60));
            assert_eq!(f.proxies["p1"].expired, !lose, "{what}");
            let want = if lose {
                AgentState::Healthy
            } else {
                AgentState::Stranded
            };
            assert_eq!(f.agents["a1"].state, want, "{what}");
        }
    }
}
