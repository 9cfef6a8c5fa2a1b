//! Shared helpers, by concern:
//! - `cluster`: the builder that starts a simulated cluster and a real
//!   Lifeline (real gRPC, real HTTP, a real SQLite file in a temp dir or a
//!   fresh database on a real PostgreSQL);
//! - `running`: what a test holds once it started: advancing time, waiting
//!   for the fleet, the API as a client sees it, stopping and restarting;
//! - `store`: which engine, fresh PostgreSQL databases, SQL on either;
//! - `pki`: certificates made for a TLS test;
//! - `api`: the CLI, the API's JSON, the dashboard's CSRF forms;
//! - `time`: real time while tokio's clock is paused;
//! - here: the test tokens and `on_both_engines!`.
//!
//! Time: tests run with tokio's clock paused (`start_paused = true`) and the
//! builder holds a blocking task for the whole test, which stops tokio from
//! auto-advancing the clock whenever the runtime looks idle (it would, while
//! loopback TCP or a SQLite commit is still in flight on another thread).
//! So virtual time moves only by `advance`/`advance_to`; every TTL and expiry
//! instant is exact. Waiting for messages to cross real sockets is bounded in
//! real time (`eventually`, `quiesce`) and never a sleep.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use lifeline::config::Config;

mod api;
mod cluster;
pub mod kube_api;
mod pki;
mod running;
mod store;
mod time;

/// The repository's top directory (the tests belong to
/// `crates/lifeline-cli`, two levels below it).
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file under `dir`, however deep, whose name ends in `.{ext}`,
/// added to `out` (none when `dir` cannot be read).
pub fn files_ending(dir: &std::path::Path, ext: &str, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_ending(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

pub use api::*;
pub use cluster::*;
pub use pki::*;
pub use running::*;
pub use store::*;
pub use time::*;

/// The agent [`Running::strand_two`] strands (with agent-00005).
pub const STRANDED: &str = "agent-00001";

/// API tokens every test Lifeline admits: all roles, read+update, read.
pub const ADMIN: &str = "test-admin-token";
pub const UPDATER: &str = "test-updater-token";
pub const READER: &str = "test-reader-token";

/// The `[access]` tokens for [`ADMIN`], [`UPDATER`] and [`READER`], and
/// the simulated agents' join token.
pub fn test_access(cfg: &mut Config) {
    use lifeline::access::hash_hex;
    use lifeline::config::{Role, TokenConfig};
    let t = |name: &str, token: &str, roles: &[Role]| TokenConfig {
        name: name.into(),
        sha256: hash_hex(token),
        roles: roles.to_vec(),
    };
    cfg.access.tokens = vec![
        t("admin", ADMIN, Role::ALL),
        t("updater", UPDATER, &[Role::Read, Role::Update]),
        t("reader", READER, &[Role::Read]),
    ];
    cfg.access.join_tokens = vec![hash_hex(lifeline_sim::SIM_JOIN_TOKEN).into()];
}

/// One test body, two tests: `<name>::sqlite` and `<name>::postgres`. The
/// body gets a [`Store`] to give [`Cluster::store`] (or to open itself).
/// ```ignore
/// on_both_engines! {
///     #[tokio::test(start_paused = true)]
///     async fn history_survives(store) { ... }
/// }
/// ```
#[allow(unused_macros)]
macro_rules! on_both_engines {
    ($(#[doc = $doc:literal])* #[tokio::test $(($($arg:tt)*))?] async fn $name:ident($store:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn run($store: $crate::support::Store) $body
            #[tokio::test $(($($arg)*))?]
            async fn sqlite() {
                run($crate::support::Store::Sqlite).await
            }
            #[tokio::test $(($($arg)*))?]
            async fn postgres() {
                // Connecting is real I/O: keep a paused clock from jumping.
                let _hold = $crate::support::hold_clock();
                let test = concat!(module_path!(), "::", stringify!($name));
                if let Some(store) = $crate::support::Store::postgres(test).await {
                    run(store).await
                }
            }
        }
    };
}
