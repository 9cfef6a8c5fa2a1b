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
//! Cost is bounded: a publish walks the unhealthy agents, and the shell
//! publishes after a settle that changed something, at most every
//! [`PUBLISH_EVERY`] of fleet time, or when a reader asks for one fresher
//! than it has (`shell::Pacer`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::model::{Model, Readiness};
use super::view::{self, AgentCounts, AgentFilter, AgentPage, AuthView, ProxyView, Summary};
use super::view::{ProxyCounts, TtlWindow};
use crate::clock::Ts;
use crate::domain::Standing;

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
    /// Reads the fleet's aggregates now, as read model `generation`.
    pub fn of(f: &Model, generation: u64) -> Published {
        let _s = tracing::debug_span!("fleet.publish").entered();
        let filter = AgentFilter {
            state: Some(Standing::Stranded),
            limit: STRANDED_ROWS,
            ..AgentFilter::default()
        };
        let (stranded, stranded_last_signals) = view::agents_with_last_signal(f, &filter);
        Published {
            summary: view::summary(f, generation),
            auth_servers: view::auth_servers(f),
            proxies: view::proxies(f),
            soonest: view::ttl_soonest(f, SOONEST_ROWS),
            stranded,
            stranded_last_signals,
        }
    }

    /// Before the fleet's first publish: nothing seen yet.
    pub fn empty(at: Ts) -> Published {
        Published {
            summary: Summary {
                generated_at: at,
                generation: 0,
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
