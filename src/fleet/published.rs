//! What the fleet publishes after it settles: one immutable read model of
//! its aggregates, shared as a `watch` of an `Arc`. The dashboard's
//! overview, auth and signals pages, the live stream, `/metrics` and the
//! API's summary, proxies and auth servers read it without asking the
//! actor, so a scrape or a hundred open dashboards never queue behind
//! ingest.
//!
//! It holds what is small whatever the fleet's size (counts, root causes,
//! proxies, auth servers, the soonest TTL windows, the first stranded
//! agents). Pages over every agent (the agent list, one agent, the TTL
//! listing) stay named queries: copying a hundred thousand agents at each
//! publish would cost more than the reads it saves.
//!
//! Cost is bounded: a publish walks the agents once, and happens after a
//! settle that changed something, at most every [`PUBLISH_EVERY`] of fleet
//! time, or when a reader asks for one fresher than it has.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::state::Fleet;
use super::view::{self, AgentCounts, AgentFilter, AgentPage, AuthView, ProxyView, Summary};
use super::view::{ProxyCounts, TtlWindow};
use super::Readiness;
use crate::clock::Ts;
use crate::model::AgentState;

/// The most often the fleet publishes on its own while it changes.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(250);
/// How many of the soonest-to-expire proxies and auth servers it carries.
pub const SOONEST_ROWS: usize = 24;
/// How many stranded agents (the first, by name) it carries.
pub const STRANDED_ROWS: usize = 10;
/// The oldest read model a reader takes without asking for a fresher one
/// (only an idle fleet has one this old: under load it publishes on its
/// own); also how long a publish may be put off for timers.
pub const MAX_AGE: Duration = Duration::from_secs(1);

/// The fleet's aggregates at one instant.
#[derive(Debug)]
pub struct Published {
    /// Counts, watcher readiness and root causes; its
    /// `generated_at` is the instant everything here was read.
    pub summary: Summary,
    pub auth_servers: Vec<AuthView>,
    /// Every proxy, by name.
    pub proxies: Vec<ProxyView>,
    /// The soonest-to-expire proxies and auth servers (expired first), and
    /// how many there are.
    pub soonest: (Vec<TtlWindow>, usize),
    /// The first stranded agents by name, each with its last audited signal.
    pub stranded: AgentPage,
    pub stranded_last_signals: Vec<Option<i64>>,
}

impl Published {
    /// Reads the fleet's aggregates now.
    pub fn of(f: &Fleet) -> Published {
        let _s = tracing::debug_span!("fleet.publish").entered();
        let filter = AgentFilter {
            state: Some(AgentState::Stranded),
            limit: STRANDED_ROWS,
            ..AgentFilter::default()
        };
        let (stranded, stranded_last_signals) = view::agents_with_last_signal(f, &filter);
        Published {
            summary: view::summary(f),
            auth_servers: view::auth_servers(f),
            proxies: view::proxies(f),
            soonest: view::ttl_soonest(f, SOONEST_ROWS),
            stranded,
            stranded_last_signals,
        }
    }

    /// Before the fleet's first publish: nothing seen yet.
    pub(super) fn empty(at: Ts) -> Published {
        Published {
            summary: Summary {
                generated_at: at,
                agents: AgentCounts::default(),
                proxies: ProxyCounts::default(),
                auth_servers: BTreeMap::new(),
                watcher: Readiness {
                    ready: false,
                    kinds: BTreeMap::new(),
                },
                classification_live: false,
                root_causes: Vec::new(),
            },
            auth_servers: Vec::new(),
            proxies: Vec::new(),
            soonest: (Vec::new(), 0),
            stranded: AgentPage {
                items: Vec::new(),
                next_cursor: None,
            },
            stranded_last_signals: Vec::new(),
        }
    }

    /// When it was read.
    pub fn at(&self) -> Ts {
        self.summary.generated_at
    }

    pub fn counts(&self) -> &AgentCounts {
        &self.summary.agents
    }
}

impl Fleet {
    /// Something readers see may have changed: publish again when due.
    pub(super) fn touch(&mut self) {
        self.touched = true;
    }

    /// When the next publish of its own is due, if anything changed.
    pub(super) fn publish_due_at(&self) -> Option<Ts> {
        self.touched.then(|| {
            self.published_at
                .saturating_add(PUBLISH_EVERY)
                .max(self.publish_not_before)
        })
    }

    /// Publishes when something changed and the last publish is
    /// [`PUBLISH_EVERY`] old. A publish walks the unhealthy agents, so it
    /// never makes a due expiry wait: it goes in a gap before the next timer
    /// at least twice as long as it is expected to take (the last publish's
    /// time, scaled by how much the unhealthy agents grew since), or after
    /// that timer (unless it is [`MAX_AGE`] overdue).
    pub(super) fn publish_if_due(&mut self) {
        let now = self.now();
        match self.publish_due_at() {
            Some(due) if now >= due => {}
            _ => return,
        }
        let grown = (self.unhealthy.len() + 1) as f64 / (self.published_unhealthy + 1) as f64;
        let expected = self.publish_cost.mul_f64(grown.max(1.0));
        let slack = (expected * 2).max(Duration::from_millis(1));
        let overdue = now.since(self.published_at.saturating_add(PUBLISH_EVERY)) >= MAX_AGE;
        match self.next_deadline() {
            Some(timer) if timer.since(now) < slack && !overdue => {
                self.publish_not_before = timer;
            }
            _ => self.publish(),
        }
    }

    /// Publishes now, if anything changed since the last publish.
    pub(super) fn publish_if_touched(&mut self) {
        if self.touched {
            self.publish();
        }
    }

    /// Publishes now.
    pub(super) fn publish(&mut self) {
        #[allow(clippy::disallowed_methods)] // what a publish costs, to schedule the next
        let started = std::time::Instant::now();
        let p = Arc::new(Published::of(self));
        self.published.send_replace(p);
        self.touched = false;
        self.published_at = self.now();
        self.publish_cost = started.elapsed();
        self.published_unhealthy = self.unhealthy.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::state::fixture::{advance_to, at, ready};
    use crate::model::Kind;

    #[tokio::test(start_paused = true)]
    async fn publishes_what_changed_at_most_every_interval_and_when_asked() {
        let mut f = ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2"]);
        let rx = f.published_watch();
        f.publish();
        assert_eq!(rx.borrow().counts().healthy, 2);
        assert_eq!(f.publish_due_at(), None, "nothing changed since");

        // p1 expires: its agents stay on p2, so they are degraded. The last
        // publish is long past, so this one is due at once.
        advance_to(&mut f, at(10)).await;
        assert_eq!(
            f.publish_due_at(),
            Some(at(0).saturating_add(PUBLISH_EVERY))
        );
        f.publish_if_due();
        let p = rx.borrow().clone();
        assert_eq!(p.counts().degraded, 2);
        assert_eq!(p.summary.proxies.expired, 1);
        assert_eq!(p.at(), at(10));
        assert_eq!(p.proxies.len(), 2);
        assert_eq!(p.summary.proxies.live, 1);

        // Another change right after waits out the interval.
        f.touch();
        let due = f.publish_due_at().expect("a change is waiting");
        assert_eq!(due, at(10).saturating_add(PUBLISH_EVERY));
        f.publish_if_due();
        assert_eq!(rx.borrow().at(), at(10), "not yet due");
        advance_to(&mut f, due).await;
        f.publish_if_due();
        assert_eq!(rx.borrow().at(), due);

        // A forced publish (what `settled` does) takes effect at once.
        advance_to(&mut f, at(3600)).await;
        f.publish_if_touched();
        let p = rx.borrow().clone();
        assert_eq!(p.counts().stranded, 2);
        assert_eq!(p.stranded.items.len(), 2);
        assert_eq!(p.soonest.1, 3, "two proxies and one auth server");
        assert_eq!(p.summary.root_causes.len(), 1);
        assert_eq!(f.publish_due_at(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_publish_waits_for_an_expiry_due_right_after_it() {
        // p2 expires 0.5 ms after p1: too close to publish between them.
        let mut f = ready(&[("p1", 10), ("p2", 3600)], &["a1"]);
        f.apply(vec![crate::fleet::Ingested::Change(
            crate::model::Change::PutServer(crate::fleet::state::fixture::server(
                Kind::Proxy,
                "p2",
                at(10).saturating_add(Duration::from_micros(500)),
            )),
        )]);
        let rx = f.published_watch();
        let before = at(10).saturating_sub(Duration::from_millis(300));
        advance_to(&mut f, before).await;
        f.publish();
        // p1 expires; the publish is due, but p2's expiry is 0.5 ms away.
        advance_to(&mut f, at(10)).await;
        f.publish_if_due();
        assert_eq!(rx.borrow().at(), before, "put off");
        let timer = at(10).saturating_add(Duration::from_micros(500));
        assert_eq!(f.publish_due_at(), Some(timer));
        advance_to(&mut f, timer).await;
        f.publish_if_due();
        assert_eq!(rx.borrow().at(), timer);
        assert_eq!(rx.borrow().summary.proxies.expired, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_expected_cost_grows_with_the_unhealthy_agents() {
        // p2 expires 2 ms after p1, which strands a1..a3.
        let mut f = ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2", "a3"]);
        let timer = at(10).saturating_add(Duration::from_millis(2));
        f.apply(vec![crate::fleet::Ingested::Change(
            crate::model::Change::PutServer(crate::fleet::state::fixture::server(
                Kind::Proxy,
                "p2",
                timer,
            )),
        )]);
        let before = at(10).saturating_sub(Duration::from_millis(300));
        advance_to(&mut f, before).await;
        f.publish();
        // The last publish took 0.4 ms over no unhealthy agent: unscaled, a
        // 2 ms gap would do; with three now, it is expected to take 1.6 ms.
        f.publish_cost = Duration::from_micros(400);
        advance_to(&mut f, at(10)).await;
        assert_eq!(f.unhealthy.len(), 3);
        f.publish_if_due();
        assert_eq!(f.published_watch().borrow().at(), before, "put off");
        assert_eq!(f.publish_due_at(), Some(timer));
    }
}
