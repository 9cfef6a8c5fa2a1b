//! `[storage]`: which database (an SQLite file or a PostgreSQL URL), how
//! long history and the audit are kept, and how much is held in memory
//! while the database is slow.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, positive, ConfigError};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// SQLite file; created when missing. Env: `LIFELINE_DB`. Ignored
    /// when `url` is set.
    pub path: PathBuf,
    /// `sqlite://<path>` or `postgres://user@host:port/db?sslmode=...`.
    /// Unset: the SQLite file at `path`. Env: `LIFELINE_DB_URL`. A
    /// password in it never reaches a log; `PGPASSWORD` works too.
    pub url: Option<DbUrl>,
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
    /// This replica's name among several on one PostgreSQL database
    /// (unset: `<hostname>:<HTTP port>`). Env: `LIFELINE_REPLICA`.
    pub replica: Option<String>,
    /// How long a leader's lease lasts without renewal: the longest a dead
    /// leader keeps the others waiting. Env: `LIFELINE_LEADER_LEASE`.
    #[serde(with = "humantime_serde")]
    pub leader_lease: Duration,
}

/// Longest replica name (it is sent in notifications and shown).
pub const MAX_REPLICA_NAME: usize = 63;

/// The shortest history retention (config and dynamic setting alike).
pub const MIN_RETENTION: Duration = Duration::from_secs(60);
/// The shortest audit retention.
pub const MIN_AUDIT_RETENTION: Duration = Duration::from_secs(3600);
/// The longest history retention: a year.
pub const MAX_RETENTION: Duration = Duration::from_secs(365 * 86_400);
/// The longest audit retention: ten years.
pub const MAX_AUDIT_RETENTION: Duration = Duration::from_secs(3650 * 86_400);

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("lifeline.db"),
            url: None,
            retention: Duration::from_secs(24 * 3600),
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            prune_interval: Duration::from_secs(60),
            max_pending_events: 1_000_000,
            replica: None,
            leader_lease: Duration::from_secs(5),
        }
    }
}

impl StorageConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.engine()?;
        for (field, d, min, max) in [
            (
                "storage.retention",
                self.retention,
                MIN_RETENTION,
                MAX_RETENTION,
            ),
            (
                "storage.audit_retention",
                self.audit_retention,
                MIN_AUDIT_RETENTION,
                MAX_AUDIT_RETENTION,
            ),
        ] {
            if d < min {
                let min = humantime::format_duration(min);
                return Err(invalid(field, format!("must be at least {min}")));
            }
            if d > max {
                let max = max.as_secs() / 86_400;
                return Err(invalid(field, format!("must be at most {max}days")));
            }
        }
        positive("storage.prune_interval", self.prune_interval)?;
        if !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&self.leader_lease) {
            return Err(invalid("storage.leader_lease", "must be between 1s and 5m"));
        }
        if let Some(name) = &self.replica {
            if name.is_empty()
                || name.len() > MAX_REPLICA_NAME
                || name.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(invalid(
                    "storage.replica",
                    format!("must be 1..={MAX_REPLICA_NAME} characters without spaces"),
                ));
            }
        }
        if self.max_pending_events < 1000 {
            return Err(invalid(
                "storage.max_pending_events",
                "must be at least 1000",
            ));
        }
        Ok(())
    }

    /// The database this configuration names: `url` when set, else the
    /// SQLite file at `path`.
    pub fn engine(&self) -> Result<Engine, ConfigError> {
        match &self.url {
            Some(url) => url.engine(),
            None if self.path.as_os_str().is_empty() => {
                Err(invalid("storage.path", "must not be empty"))
            }
            None => Ok(Engine::Sqlite(self.path.clone())),
        }
    }
}

/// Which engine holds the store, and where.
#[derive(Clone, PartialEq, Eq)]
pub enum Engine {
    /// The embedded default: one file, one process.
    Sqlite(PathBuf),
    /// A shared server (several replicas): the URL as given.
    Postgres(DbUrl),
}

impl Engine {
    /// Short name for logs and metrics: `sqlite` or `postgres`.
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Sqlite(_) => "sqlite",
            Engine::Postgres(_) => "postgres",
        }
    }
}

/// Where the database is, for logs and errors: the file, or the URL
/// without its password.
impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Engine::Sqlite(p) => write!(f, "{}", p.display()),
            Engine::Postgres(u) => write!(f, "{u}"),
        }
    }
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({self})", self.name())
    }
}

/// A database URL. It may carry a password, so it shows (`Display`,
/// `Debug`) only with the password replaced; [`DbUrl::expose`] gives the
/// real text to the driver alone.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DbUrl(String);

/// Shown (`check-config`) as it displays: without its password.
impl Serialize for DbUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl DbUrl {
    pub fn new(url: impl Into<String>) -> DbUrl {
        DbUrl(url.into())
    }

    /// The URL with its password, for the database driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn engine(&self) -> Result<Engine, ConfigError> {
        let field = "storage.url";
        let (scheme, rest) = self.0.split_once(':').ok_or_else(|| {
            invalid(
                field,
                format!("`{self}` has no scheme: use sqlite://<path> or postgres://<host>/<db>"),
            )
        })?;
        match scheme {
            "sqlite" => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                let path = path.split_once('?').map_or(path, |(p, _)| p);
                if path.is_empty() {
                    return Err(invalid(
                        field,
                        "sqlite:// needs a file path, e.g. sqlite://lifeline.db",
                    ));
                }
                Ok(Engine::Sqlite(PathBuf::from(path)))
            }
            "postgres" | "postgresql" => {
                let u = url::Url::parse(&self.0)
                    .map_err(|e| invalid(field, format!("`{self}` is not a URL: {e}")))?;
                if u.path().trim_start_matches('/').is_empty() {
                    return Err(invalid(
                        field,
                        format!("`{self}` names no database: add /<database> after the host"),
                    ));
                }
                Ok(Engine::Postgres(self.clone()))
            }
            other => Err(invalid(
                field,
                format!("unknown scheme `{other}`: use sqlite://<path> or postgres://<host>/<db>"),
            )),
        }
    }
}

impl fmt::Display for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match url::Url::parse(&self.0) {
            Ok(mut u)
                if u.password().is_some() || u.query().is_some_and(|q| q.contains("password")) =>
            {
                if u.password().is_some() {
                    let _ = u.set_password(Some("***"));
                }
                let pairs: Vec<(String, String)> = u
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if k == "password" {
                            "***".into()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                if !pairs.is_empty() {
                    u.query_pairs_mut().clear().extend_pairs(pairs);
                }
                write!(f, "{u}")
            }
            Ok(_) => f.write_str(&self.0),
            // Not a URL: show the scheme only, in case the rest is secret.
            Err(_) => write!(f, "{}:…", self.0.split(':').next().unwrap_or("")),
        }
    }
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DbUrl({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(url: &str) -> Result<Engine, String> {
        DbUrl::new(url).engine().map_err(|e| e.to_string())
    }

    #[test]
    fn urls_name_an_engine_or_say_what_is_wrong() {
        assert_eq!(
            engine("sqlite://data/l.db"),
            Ok(Engine::Sqlite("data/l.db".into()))
        );
        assert_eq!(
            engine("sqlite:///var/lib/l.db"),
            Ok(Engine::Sqlite("/var/lib/l.db".into()))
        );
        assert_eq!(engine("sqlite:l.db"), Ok(Engine::Sqlite("l.db".into())));
        let pg = "postgres://lifeline@db:5432/lifeline?sslmode=verify-full";
        assert_eq!(engine(pg), Ok(Engine::Postgres(DbUrl::new(pg))));
        for (bad, needle) in [
            ("lifeline.db", "no scheme"),
            ("sqlite://", "needs a file path"),
            ("mysql://h/db", "unknown scheme `mysql`"),
            ("postgres://h", "names no database"),
            ("postgres://h:notaport/db", "not a URL"),
        ] {
            let e = engine(bad).unwrap_err();
            assert!(
                e.contains("storage.url") && e.contains(needle),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_password_never_shows() {
        for url in [
            "postgres://lifeline:hunter2@db/lifeline",
            "postgres://lifeline@db/lifeline?password=hunter2&sslmode=require",
            "postgres://lifeline:hunter2@db:notaport/lifeline",
        ] {
            let u = DbUrl::new(url);
            for shown in [u.to_string(), format!("{u:?}")] {
                assert!(!shown.contains("hunter2"), "{shown}");
            }
            let e = u
                .engine()
                .map(|e| format!("{e} {e:?}"))
                .unwrap_or_else(|e| e.to_string());
            assert!(!e.contains("hunter2"), "{e}");
        }
        assert!(DbUrl::new("postgres://l:pw@db/x")
            .to_string()
            .contains("l:***@db/x"));
    }
}
