//! The `teleport` source's configuration and the state that outlives a
//! session: the hosts (with the TTLs learned and the Auth attachments)
//! the next listing starts from, and the services the watch showed that
//! no listing held.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::convert::Ttls;
use super::hosts::Hosts;
use crate::clock::Clock;
use crate::domain::AgentService;
use crate::fleet::FleetHandle;
use crate::ingest::dial::Dialer;
use crate::ingest::validate::Limits;
use crate::stats::Stats;

#[derive(Clone, Debug)]
pub struct TeleportConfig {
    /// The Auth server (or proxy, with TLS routing) as `host:port`.
    pub addr: String,
    pub dialer: Dialer,
    pub agent_kinds: Vec<AgentService>,
    pub page_size: u32,
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
    pub instances_poll: Duration,
    pub limits: Limits,
}

/// The `teleport` source. Its hosts (with the TTLs learned and the Auth
/// attachments) outlive a session: the next listing starts from them.
pub struct Teleport {
    pub cfg: TeleportConfig,
    pub clock: Clock,
    pub fleet: FleetHandle,
    pub stats: Arc<Stats>,
    pub(super) ttls: Ttls,
    pub(super) hosts: Hosts,
    /// Services the watch showed that the last listing did not hold: new
    /// arrivals, or hidden from listings by the role's `*_labels`. A
    /// listing again tells which (bounded by [`MAX_UNLISTED`]).
    pub(super) unlisted: BTreeSet<(AgentService, String)>,
}

/// Most services the watch showed unlisted that are kept for the check.
pub(super) const MAX_UNLISTED: usize = 10_000;

/// How long after the first unlisted service the kinds are listed again to
/// tell new arrivals from hidden ones.
pub const RELIST_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// While some stay hidden, how often they are looked for again (a fixed
/// role is noticed; a large cluster is not listed every minute).
pub const RELIST_HIDDEN: std::time::Duration = std::time::Duration::from_secs(15 * 60);

impl Teleport {
    pub fn new(
        cfg: TeleportConfig,
        clock: Clock,
        fleet: FleetHandle,
        stats: Arc<Stats>,
    ) -> Teleport {
        Teleport {
            cfg,
            clock,
            fleet,
            stats,
            ttls: Ttls::default(),
            hosts: Hosts::default(),
            unlisted: BTreeSet::new(),
        }
    }
}
