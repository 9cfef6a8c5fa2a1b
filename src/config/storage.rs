//! `[storage]`: the database file, how long history and the audit are
//! kept, and how much is held in memory while the database is slow.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{invalid, positive, ConfigError};

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// SQLite file; created when missing. Env: `LIFELINE_DB`.
    pub path: PathBuf,
    /// How long event history (heartbeats, health transitions) is kept.
    /// Env: `LIFELINE_RETENTION`.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How long the signal audit and closed stranded episodes are kept.
    /// Pending signals and open episodes are never pruned.
    /// Env: `LIFELINE_AUDIT_RETENTION`.
    #[serde(with = "humantime_serde")]
    pub audit_retention: Duration,
    /// How often old history is pruned.
    #[serde(with = "humantime_serde")]
    pub prune_interval: Duration,
    /// Writes held in memory while SQLite is slow; history past this is
    /// dropped (and counted), current state never is.
    pub max_pending_events: usize,
}

/// The shortest history retention (config and dynamic setting alike).
pub const MIN_RETENTION: Duration = Duration::from_secs(60);
/// The shortest audit retention.
pub const MIN_AUDIT_RETENTION: Duration = Duration::from_secs(3600);

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("lifeline.db"),
            retention: Duration::from_secs(24 * 3600),
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            prune_interval: Duration::from_secs(60),
            max_pending_events: 1_000_000,
        }
    }
}

impl StorageConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.path.as_os_str().is_empty() {
            return Err(invalid("storage.path", "must not be empty"));
        }
        for (field, d, min) in [
            ("storage.retention", self.retention, MIN_RETENTION),
            (
                "storage.audit_retention",
                self.audit_retention,
                MIN_AUDIT_RETENTION,
            ),
        ] {
            if d < min {
                let min = humantime::format_duration(min);
                return Err(invalid(field, format!("must be at least {min}")));
            }
        }
        positive("storage.prune_interval", self.prune_interval)?;
        if self.max_pending_events < 1000 {
            return Err(invalid(
                "storage.max_pending_events",
                "must be at least 1000",
            ));
        }
        Ok(())
    }
}
