//! Generated protobuf and gRPC code for `lifeline.v1` (see `proto/`), plus the
//! standard health protocol re-exported from tonic-health.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("lifeline.v1");
}

pub use tonic_health::pb as health;
