//! The memory budget: what Lifeline's resident memory may reach, part by
//! part. The book's Memory budget page is generated from it, the
//! Kubernetes requests and limits are held to it by a test, and the soak
//! benchmark (`lifeline-bench soak`) measures a running Lifeline against
//! it. Owns figures only; it measures nothing and limits nothing.

use crate::store::{SQLITE_CACHE_KIB, SQLITE_CONNECTIONS};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// The fixed part: the binary, its runtime, the HTTP and gRPC servers and
/// their bounded buffers, the store's pool without its page cache. A
/// release build with no fleet measured 20–30 MiB resident
/// (`lifeline-bench soak`'s `rss_kib.ready` less the fleet's share); the
/// budget allows twice the high end.
pub const FIXED_BYTES: u64 = 64 * MIB;

/// What one agent (with its tunnels) costs in the fleet's model: 2.2 KiB
/// through the `lifeline` source, 3.1 KiB through the `teleport` source at
/// 100 k agents (`lifeline-bench resync`); the budget takes the larger.
pub const PER_AGENT_BYTES: u64 = 3_200;

/// What one agent's signal stream costs: about 10.5 KiB, its HTTP/2
/// stream and bounded buffers (`lifeline-bench fanout`).
pub const PER_STREAM_BYTES: u64 = 10_752;

/// The fleet the Kubernetes Deployment's requests and limits are sized
/// for, each agent holding a stream.
pub const KUBERNETES_AGENTS: u64 = 10_000;

/// The engine the budget is for: SQLite keeps its page cache in
/// Lifeline's memory, PostgreSQL in the server's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The budget of one Lifeline, in bytes, by part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Grows with nothing.
    pub fixed: u64,
    /// Grows with the database, up to its cap (SQLite only).
    pub page_cache: u64,
    /// Grows with agents.
    pub fleet: u64,
    /// Grows with the agents connected to Lifeline.
    pub streams: u64,
}

impl Budget {
    /// The budget for `agents`, `streams` of them connected.
    pub fn of(engine: Engine, agents: u64, streams: u64) -> Budget {
        Budget {
            fixed: FIXED_BYTES,
            page_cache: match engine {
                Engine::Sqlite => sqlite_page_cache_cap(),
                Engine::Postgres => 0,
            },
            fleet: agents.saturating_mul(PER_AGENT_BYTES),
            streams: streams.saturating_mul(PER_STREAM_BYTES),
        }
    }

    /// Everything: what resident memory may reach.
    pub fn total(&self) -> u64 {
        self.fixed
            .saturating_add(self.page_cache)
            .saturating_add(self.fleet)
            .saturating_add(self.streams)
    }

    /// What is in use before the page cache has filled: a Kubernetes
    /// request.
    pub fn without_page_cache(&self) -> u64 {
        self.total().saturating_sub(self.page_cache)
    }
}

/// The most SQLite's page cache may hold: its cap on each connection.
pub fn sqlite_page_cache_cap() -> u64 {
    u64::from(SQLITE_CACHE_KIB) * KIB * u64::from(SQLITE_CONNECTIONS)
}

fn mib(bytes: u64) -> String {
    let m = bytes as f64 / MIB as f64;
    if m >= 10.0 {
        format!("{m:.0} MiB")
    } else {
        format!("{m:.1} MiB")
    }
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / KIB as f64)
}

/// The book's table of the budget's parts (Memory budget page).
pub fn parts_markdown() -> String {
    let k = Budget::of(Engine::Sqlite, KUBERNETES_AGENTS, KUBERNETES_AGENTS);
    let pg = Budget::of(Engine::Postgres, KUBERNETES_AGENTS, KUBERNETES_AGENTS);
    let mut out = format!(
        "| part | grows with | allowed | for {KUBERNETES_AGENTS} agents, each with a stream |\n|---|---|---|---|\n"
    );
    out.push_str(&format!(
        "| **Fixed** | nothing: the binary, its runtime, the servers and their bounded buffers | {} | {} |\n",
        mib(FIXED_BYTES),
        mib(k.fixed)
    ));
    out.push_str(&format!(
        "| **SQLite's page cache** | the database, up to its cap | {} per connection × {} connections | {} (PostgreSQL: 0, the server holds it) |\n",
        mib(u64::from(SQLITE_CACHE_KIB) * KIB),
        SQLITE_CONNECTIONS,
        mib(k.page_cache)
    ));
    out.push_str(&format!(
        "| **The fleet** | agents and their tunnels | {} per agent | {} |\n",
        kib(PER_AGENT_BYTES),
        mib(k.fleet)
    ));
    out.push_str(&format!(
        "| **Signal streams** | agents connected to Lifeline | {} per stream | {} |\n",
        kib(PER_STREAM_BYTES),
        mib(k.streams)
    ));
    out.push_str(
        "| **History** | nothing in Lifeline | kept in the database; retention bounds the file, and so what the page cache may hold | 0 |\n",
    );
    out.push_str(&format!(
        "| **All** | | | **{}** on SQLite, {} on PostgreSQL; {} before the page cache fills |\n",
        mib(k.total()),
        mib(pg.total()),
        mib(k.without_page_cache())
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_adds_its_parts_and_postgres_has_no_page_cache() {
        let s = Budget::of(Engine::Sqlite, 1000, 500);
        assert_eq!(s.page_cache, 4 * 64 * MIB);
        assert_eq!(
            s.total(),
            FIXED_BYTES + 4 * 64 * MIB + 1000 * PER_AGENT_BYTES + 500 * PER_STREAM_BYTES
        );
        assert_eq!(s.without_page_cache(), s.total() - s.page_cache);
        let p = Budget::of(Engine::Postgres, 1000, 500);
        assert_eq!(p.page_cache, 0);
        assert_eq!(p.total(), s.without_page_cache());
        // Overflowing fleets saturate instead of wrapping.
        assert_eq!(
            Budget::of(Engine::Sqlite, u64::MAX, u64::MAX).total(),
            u64::MAX
        );
    }
}
