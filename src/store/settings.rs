//! The dynamic settings' rows and their audit. Like the signal audit, these
//! are written directly, not through the batch writer: a change is
//! committed, with its audit row in the same transaction, before the API
//! answers for it. The rules (who may overwrite what) live in `settings`;
//! this file only reads and writes rows.

use serde::Serialize;
use sqlx::{Sqlite, SqlitePool, Transaction};

use crate::clock::Ts;
use crate::model::{Origin, SettingAction};

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

pub async fn all(db: &SqlitePool) -> Result<Vec<StoredSetting>, sqlx::Error> {
    sqlx::query_as("SELECT name, value, origin, updated_us, updated_by FROM settings ORDER BY name")
        .fetch_all(db)
        .await
}

/// Begins a change of settings, which reads the stored rows, then writes.
/// In WAL mode a deferred transaction that read before another connection
/// committed cannot take the write lock (`SQLITE_BUSY_SNAPSHOT`, with no
/// wait); taking the lock first makes a concurrent writer wait instead.
pub async fn begin_change(db: &SqlitePool) -> Result<Transaction<'static, Sqlite>, sqlx::Error> {
    db.begin_with("BEGIN IMMEDIATE").await
}

/// One setting's row.
const ONE: &str = "SELECT name, value, origin, updated_us, updated_by FROM settings WHERE name = ?";

pub async fn get(db: &SqlitePool, name: &str) -> Result<Option<StoredSetting>, sqlx::Error> {
    sqlx::query_as(ONE).bind(name).fetch_optional(db).await
}

pub async fn get_in(
    tx: &mut Transaction<'_, Sqlite>,
    name: &str,
) -> Result<Option<StoredSetting>, sqlx::Error> {
    sqlx::query_as(ONE)
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
}

/// Writes `new` and its audit row (`old` is what it replaces) in `tx`.
pub async fn put_in(
    tx: &mut Transaction<'_, Sqlite>,
    new: &StoredSetting,
    old: Option<&StoredSetting>,
    action: SettingAction,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO settings (name, value, origin, updated_us, updated_by) VALUES (?, ?, ?, ?, ?) \
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
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
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
    Ok(())
}

/// The newest changes of one setting, newest first.
pub async fn history(
    db: &SqlitePool,
    name: &str,
    limit: u32,
) -> Result<Vec<SettingChange>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, at_us, name, action, old_value, old_origin, new_value, new_origin, actor \
         FROM settings_audit WHERE name = ? ORDER BY id DESC LIMIT ?",
    )
    .bind(name)
    .bind(limit)
    .fetch_all(db)
    .await
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
        let db = crate::store::open(&path, Duration::from_secs(5))
            .await
            .unwrap();
        let mut tx = begin_change(&db).await.unwrap();
        assert_eq!(get_in(&mut tx, "retention").await.unwrap(), None);

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
        put_in(&mut tx, &new, None, SettingAction::Create)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(get(&db, "retention").await.unwrap(), Some(new));
        other.close().await.unwrap();
    }
}
