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
#[derive(Clone, Debug, Serialize, sqlx::FromRow)]
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
