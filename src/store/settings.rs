//! The dynamic settings' rows and their audit. Like the signal audit, these
//! are written directly, not through the batch writer: a change is
//! committed, with its audit row in the same transaction, before the API
//! answers for it. The rules (who may overwrite what) live in `settings`;
//! this file only reads and writes rows.

use serde::Serialize;
use sqlx::{Postgres, Sqlite, Transaction};

use super::{on_pool, Db};

use crate::clock::Ts;
use crate::domain::{Origin, SettingAction};

/// A stored setting (value is JSON text).
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct StoredSetting {
    pub name: String,
    pub value: String,
    pub origin: Origin,
    pub updated_us: i64,
    pub updated_by: String,
}

/// One change of a setting.
#[derive(Clone, Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct SettingChange {
    pub id: i64,
    #[serde(skip)]
    pub at_us: i64,
    pub name: String,
    pub action: SettingAction,
    pub old_value: Option<String>,
    pub old_origin: Option<Origin>,
    pub new_value: String,
    pub new_origin: Origin,
    pub actor: String,
}

impl SettingChange {
    pub fn at(&self) -> Ts {
        Ts(self.at_us)
    }
}

pub async fn all(db: &Db) -> Result<Vec<StoredSetting>, sqlx::Error> {
    on_pool!(db, pool => {
        sqlx::query_as("SELECT name, value, origin, updated_us, updated_by FROM settings ORDER BY name")
            .fetch_all(pool)
            .await
    })
}

/// A change of settings under way: one transaction that holds the
/// settings' write lock from its first read to its commit, so two changes
/// (from two API calls, or two replicas) never interleave.
pub enum Change {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$tx` bound to the change's own transaction type.
macro_rules! on_tx {
    ($change:expr, $tx:ident => $body:expr) => {
        match $change {
            Change::Sqlite($tx) => $body,
            Change::Postgres($tx) => $body,
        }
    };
}

/// The advisory lock key that serialises settings changes on PostgreSQL
/// (any constant that no other lock uses; "LLSETTNG" in ASCII).
const SETTINGS_LOCK: i64 = 0x4c4c_5345_5454_4e47;

/// Begins a change of settings, which reads the stored rows, then writes.
/// SQLite: in WAL mode a deferred transaction that read before another
/// connection committed cannot take the write lock (`SQLITE_BUSY_SNAPSHOT`,
/// with no wait); taking the lock first makes a concurrent writer wait
/// instead. PostgreSQL: a transaction-scoped advisory lock does the same
/// across replicas.
pub async fn begin_change(db: &Db) -> Result<Change, sqlx::Error> {
    match db {
        Db::Sqlite(pool) => Ok(Change::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?)),
        Db::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(SETTINGS_LOCK)
                .execute(&mut *tx)
                .await?;
            Ok(Change::Postgres(tx))
        }
    }
}

/// One setting's row.
const ONE: &str =
    "SELECT name, value, origin, updated_us, updated_by FROM settings WHERE name = $1";

pub async fn get(db: &Db, name: &str) -> Result<Option<StoredSetting>, sqlx::Error> {
    on_pool!(db, pool => sqlx::query_as(ONE).bind(name).fetch_optional(pool).await)
}

impl Change {
    pub async fn get(&mut self, name: &str) -> Result<Option<StoredSetting>, sqlx::Error> {
        on_tx!(self, tx => sqlx::query_as(ONE).bind(name).fetch_optional(&mut **tx).await)
    }

    /// Writes `new` and its audit row (`old` is what it replaces).
    pub async fn put(
        &mut self,
        new: &StoredSetting,
        old: Option<&StoredSetting>,
        action: SettingAction,
    ) -> Result<(), sqlx::Error> {
        on_tx!(self, tx => {
            sqlx::query(
                "INSERT INTO settings (name, value, origin, updated_us, updated_by) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value, origin = excluded.origin, \
                 updated_us = excluded.updated_us, updated_by = excluded.updated_by",
            )
            .bind(&new.name)
            .bind(&new.value)
            .bind(new.origin)
            .bind(new.updated_us)
            .bind(&new.updated_by)
            .execute(&mut **tx)
            .await?;
            sqlx::query(
                "INSERT INTO settings_audit (at_us, name, action, old_value, old_origin, new_value, new_origin, actor) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(new.updated_us)
            .bind(&new.name)
            .bind(action)
            .bind(old.map(|o| o.value.clone()))
            .bind(old.map(|o| o.origin))
            .bind(&new.value)
            .bind(new.origin)
            .bind(&new.updated_by)
            .execute(&mut **tx)
            .await?;
        });
        if let Change::Postgres(tx) = self {
            // Delivered at commit, to every replica listening.
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(super::lease::SETTINGS_CHANNEL)
                .bind(&new.name)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        on_tx!(self, tx => tx.commit().await)
    }
}

/// The newest changes of one setting, newest first.
pub async fn history(db: &Db, name: &str, limit: u32) -> Result<Vec<SettingChange>, sqlx::Error> {
    on_pool!(db, pool => {
        sqlx::query_as(
            "SELECT id, at_us, name, action, old_value, old_origin, new_value, new_origin, actor \
             FROM settings_audit WHERE name = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(name)
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqliteConnectOptions;
    use sqlx::{ConnectOptions, Connection};
    use std::time::Duration;

    /// Guards a change against a writer on another connection: the
    /// change holds the write lock from its first read, so the other
    /// writer is the one refused (here at once, with no busy wait), and
    /// the change's own write commits. A deferred begin lets the other
    /// commit in between and then fails the change with BUSY_SNAPSHOT.
    #[tokio::test]
    async fn a_change_keeps_the_write_lock_from_its_first_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lifeline.db");
        let engine = crate::store::Engine::Sqlite(path.clone());
        let db = crate::store::open(
            &engine,
            crate::store::Waits::patient(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        let mut tx = begin_change(&db).await.unwrap();
        assert_eq!(tx.get("retention").await.unwrap(), None);

        let mut other = SqliteConnectOptions::new()
            .filename(&path)
            .busy_timeout(Duration::ZERO)
            .connect()
            .await
            .unwrap();
        let theirs = sqlx::query(
            "INSERT INTO settings (name, value, origin, updated_us, updated_by) VALUES ('retention', '\"2h\"', 'dynamic', 1, 'other')",
        )
        .execute(&mut other)
        .await;
        assert!(theirs.is_err(), "the other writer got in: {theirs:?}");

        let new = StoredSetting {
            name: "retention".into(),
            value: "\"1h\"".into(),
            origin: Origin::Dynamic,
            updated_us: 2,
            updated_by: "test".into(),
        };
        tx.put(&new, None, SettingAction::Create).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(get(&db, "retention").await.unwrap(), Some(new));
        other.close().await.unwrap();
    }
}
