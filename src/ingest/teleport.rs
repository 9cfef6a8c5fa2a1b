//! Teleport's own Auth API as a cluster source, next to the `ClusterEvents`
//! watcher: what it needs to reach a Teleport cluster.
//!
//! Owns: reading the identity file `tctl auth sign --format=file` writes
//! (`identity`), with a clear error for every way it can be wrong. Must not
//! touch: fleet state or SQLite; never logs key material.

pub mod identity;
