//! Teleport's own Auth API as a cluster source, the sibling of the
//! `ClusterEvents` watcher behind the same `watcher::Source` seam.
//!
//! Owns: reading the identity file `tctl auth sign --format=file` writes
//! (`identity`), turning Teleport's resources into validated domain values
//! (`convert`), reading a node's heartbeat where it lies in the
//! watch's bytes (`heartbeat`), folding agent services into one agent per
//! host with its tunnels (`hosts`, its proxy names and versions kept once
//! each by `interned`), listing agent services a page ahead
//! (`pages`), which Auth saw each host (`instances`, kept in name order by
//! `auth_of`), prost's wire primitives for reading a message where it lies
//! (`wire`) and the codec of a call whose answers it reads itself
//! (`call`), the source's state between sessions (`state`), a session's
//! listing (`listing`), the watch session itself (`source`), and reading
//! the identity file again when it is renewed (`renew`). Must not touch: fleet state or
//! SQLite; never logs key material.

mod auth_of;
mod call;
pub mod convert;
mod heartbeat;
pub mod hosts;
pub mod http;
pub mod identity;
mod instances;
mod interned;
mod listing;
mod pages;
pub mod renew;
pub mod source;
mod state;
mod wire;
