//! Keys the replicas share: made once by whichever starts first (a
//! random 32 bytes, inserted unless a row is there), then read by every
//! replica, so what one signs another verifies. Which keys there are and
//! what they sign is the `access` room's.

use rand::RngCore;

use super::{on_pool, Db};
use crate::clock::Ts;

/// Why a shared key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read or make the shared key {name:?}: {source}")]
    Query {
        name: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("the shared key {name:?} in the database is not 64 hex digits; delete its row (shared_keys) to have a new one made")]
    Malformed { name: String },
}

/// The key stored as `name`, made now if there is none.
pub async fn shared_key(db: &Db, name: &str, now: Ts) -> Result<[u8; 32], KeyError> {
    let mut fresh = [0u8; 32];
    rand::rng().fill_bytes(&mut fresh);
    let fresh = hex::encode(fresh);
    let stored: Result<String, sqlx::Error> = on_pool!(db, pool => {
        async {
            sqlx::query(
                "INSERT INTO shared_keys (name, value, created_us) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(&fresh)
            .bind(now.as_micros())
            .execute(pool)
            .await?;
            sqlx::query_scalar("SELECT value FROM shared_keys WHERE name = $1")
                .bind(name)
                .fetch_one(pool)
                .await
        }
        .await
    });
    let stored = stored.map_err(|source| KeyError::Query {
        name: name.to_string(),
        source,
    })?;
    let mut key = [0u8; 32];
    hex::decode_to_slice(stored.trim(), &mut key).map_err(|_| KeyError::Malformed {
        name: name.to_string(),
    })?;
    Ok(key)
}
