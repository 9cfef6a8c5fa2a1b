//! The database's clock, as one replica reads it. Among replicas the
//! signal audit is written by several processes, so its times (created,
//! delivered, acked) and the windows read against them (the leader's
//! sweep, the make-up read) follow one clock: PostgreSQL's. Each replica
//! measures how far its own wall clock is from the database's and adds
//! that. Deadlines and latencies stay on the replica's monotonic clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, Ts};

/// A measurement whose round trip took longer says too little.
pub const MAX_ROUND_TRIP: Duration = Duration::from_secs(1);

/// This replica's clock, moved by its last measured offset to the
/// database's. Cheap to clone; the clones share the offset.
#[derive(Clone, Debug)]
pub struct DbTime {
    clock: Clock,
    /// Database minus this replica, microseconds.
    offset_us: Arc<AtomicI64>,
}

impl DbTime {
    /// Offset 0 until [`DbTime::measure`] says otherwise.
    pub fn new(clock: Clock) -> DbTime {
        DbTime {
            clock,
            offset_us: Arc::new(AtomicI64::new(0)),
        }
    }

    /// The database's time now, as well as this replica knows it.
    pub fn now(&self) -> Ts {
        let now = self.clock.now();
        Ts(now.0.saturating_add(self.offset_us.load(Ordering::Relaxed)))
    }

    /// Database minus this replica, microseconds.
    pub fn offset_us(&self) -> i64 {
        self.offset_us.load(Ordering::Relaxed)
    }

    /// Reads the database's clock and keeps the offset to this replica's,
    /// taken at the middle of the round trip. `None` (offset unchanged)
    /// when the round trip took longer than [`MAX_ROUND_TRIP`].
    pub async fn measure(&self, pg: &super::Pg) -> Result<Option<i64>, sqlx::Error> {
        let before = self.clock.now();
        let sent = self.clock.instant();
        let db_us = sqlx::query_scalar::<_, i64>(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
        )
        .fetch_one(&pg.pool);
        let db_us = pg.bounded(db_us).await?;
        let trip = self.clock.instant().saturating_duration_since(sent);
        if trip > MAX_ROUND_TRIP {
            return Ok(None);
        }
        let middle = before.saturating_add(trip / 2);
        let offset = db_us.saturating_sub(middle.0);
        self.offset_us.store(offset, Ordering::Relaxed);
        Ok(Some(offset))
    }
}
