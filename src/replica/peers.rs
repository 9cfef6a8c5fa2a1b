//! The replicas' side of the hub's `Peers` seam: who holds which agent's
//! stream (the `agent_streams` rows of live replicas), waking the one that
//! does (a NOTIFY on its channel), and the database's clock for the audit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::store::Pg;
use futures::future::BoxFuture;

use super::lease;
use crate::clock::Ts;
use crate::signals::peers::{Holder, PeerError, Peers};
use crate::store::db_time::DbTime;

/// This replica among the others on one PostgreSQL database.
pub struct Replicas {
    /// This replica's name.
    pub me: Arc<str>,
    pub pool: Pg,
    /// A replica silent for longer holds no stream.
    pub lease: Duration,
    /// The database's clock: the audit's times among replicas.
    pub db_time: DbTime,
}

impl Peers for Replicas {
    fn replicated(&self) -> bool {
        true
    }

    fn now(&self) -> Ts {
        self.db_time.now()
    }

    fn owners<'a>(
        &'a self,
        agents: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, Holder>, PeerError>> {
        Box::pin(async move {
            let mut owners = lease::owners(&self.pool, agents, self.lease)
                .await
                .map_err(|e| PeerError::Unreachable(Box::new(e)))?;
            owners.retain(|_, h| *h.replica != *self.me);
            Ok(owners)
        })
    }

    fn wake<'a>(
        &'a self,
        replica: &'a str,
        ids: &'a [i64],
    ) -> BoxFuture<'a, Result<(), PeerError>> {
        Box::pin(async move {
            lease::notify_signals(&self.pool, replica, ids)
                .await
                .map_err(|e| PeerError::Unreachable(Box::new(e)))
        })
    }
}
