//! Several replicas on one PostgreSQL database: the leader lease row, the
//! replicas' heartbeats, which replica holds each agent's signal stream,
//! the notifications that wake a replica, and the leader's sweep of
//! signals nobody will answer. Only rows and SQL live here; the loops that
//! use them are in `replica`. Every deadline is in the database's clock
//! (`clock_timestamp()`), so replicas whose clocks disagree still agree on
//! who leads.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::{Postgres, QueryBuilder};

use crate::store::Pg;

use crate::clock::{dur_micros, Ts};
use crate::signals::peers::Holder;

/// The database's clock in microseconds since the Unix epoch.
macro_rules! db_now {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000000)::bigint"
    };
}

/// A lease this replica holds, in the database's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenure {
    pub term: i64,
    pub deadline_us: i64,
}

/// Someone else's lease, and the database's clock when it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub holder: String,
    pub term: i64,
    pub deadline_us: i64,
    pub now_us: i64,
}

/// What trying to take (or renew) the lease found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Ours(Tenure),
    Theirs(Held),
    /// Nobody has ever held it and the row could not be made (a race).
    Nobody,
}

/// Renews the lease in term `leading` (this replica leads in it), or,
/// with `None`, takes it if it is free, lapsed or left to this replica.
/// Taking it always starts a new tenure with the next term, even when the
/// row still names this replica: what an earlier tenure of its own queued
/// is then fenced like anybody else's, and cannot land after the new
/// tenure has read the database. A renewal keeps its term, also when the
/// lease lapsed meanwhile and nobody took it: nobody else wrote.
pub async fn try_lead(
    pg: &Pg,
    me: &str,
    lease: Duration,
    leading: Option<i64>,
) -> Result<Attempt, sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
    let ours: Option<(i64, i64)> = sqlx::query_as(concat!(
        "WITH now AS (SELECT ",
        db_now!(),
        " AS us) \
         INSERT INTO leader_lease AS l (id, holder, term, deadline_us, since_us) \
         SELECT 1, $1, 1, now.us + $2, now.us FROM now \
         ON CONFLICT (id) DO UPDATE SET \
           term = CASE WHEN $3::bigint IS NOT NULL THEN l.term ELSE l.term + 1 END, \
           since_us = CASE WHEN $3::bigint IS NOT NULL THEN l.since_us ELSE EXCLUDED.since_us END, \
           holder = EXCLUDED.holder, \
           deadline_us = EXCLUDED.deadline_us \
         WHERE (l.holder = EXCLUDED.holder AND l.term = $3::bigint) \
            OR ($3::bigint IS NULL AND (l.holder = EXCLUDED.holder OR l.deadline_us <= EXCLUDED.since_us)) \
         RETURNING term, deadline_us"
    ))
    .bind(me)
    .bind(dur_micros(lease))
    .bind(leading)
    .fetch_optional(pool)
    .await?;
    if let Some((term, deadline_us)) = ours {
        return Ok(Attempt::Ours(Tenure { term, deadline_us }));
    }
    let theirs: Option<(String, i64, i64, i64)> = sqlx::query_as(concat!(
        "SELECT holder, term, deadline_us, ",
        db_now!(),
        " FROM leader_lease WHERE id = 1"
    ))
    .fetch_optional(pool)
    .await?;
    Ok(match theirs {
        Some((holder, term, deadline_us, now_us)) => Attempt::Theirs(Held {
            holder,
            term,
            deadline_us,
            now_us,
        }),
        None => Attempt::Nobody,
    })
}).await
}

/// Gives the lease up at once (a clean shutdown), so a follower need not
/// wait for it to lapse. A term that is no longer ours changes nothing.
pub async fn release(pg: &Pg, me: &str, term: i64) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        sqlx::query(
            "UPDATE leader_lease SET deadline_us = 0 WHERE id = 1 AND holder = $1 AND term = $2",
        )
        .bind(me)
        .bind(term)
        .execute(pool)
        .await?;
        Ok(())
    })
    .await
}

/// Takes this replica's name for as long as `conn` (a connection of its
/// own) lives: a session advisory lock on the name. False: another live
/// session holds it.
pub async fn hold_name(conn: &mut sqlx::PgConnection, me: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT pg_try_advisory_lock(hashtextextended('lifeline-replica:' || $1, 0))",
    )
    .bind(me)
    .fetch_one(conn)
    .await
}

/// Records this replica (at start: its start time is now).
pub async fn register(pg: &Pg, me: &str, http: &str, grpc: &str) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let mut tx = pool.begin().await?;
        sqlx::query(concat!(
            "INSERT INTO replicas (id, http_addr, grpc_addr, started_us, heartbeat_us) \
         VALUES ($1, $2, $3, ",
            db_now!(),
            ", ",
            db_now!(),
            ") ON CONFLICT (id) DO UPDATE SET http_addr = EXCLUDED.http_addr, \
         grpc_addr = EXCLUDED.grpc_addr, started_us = EXCLUDED.started_us, \
         heartbeat_us = EXCLUDED.heartbeat_us"
        ))
        .bind(me)
        .bind(http)
        .bind(grpc)
        .execute(&mut *tx)
        .await?;
        // Streams a previous run of this replica held are gone with it.
        sqlx::query("DELETE FROM agent_streams WHERE replica = $1")
            .bind(me)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    })
    .await
}

/// This replica is alive.
pub async fn heartbeat(pg: &Pg, me: &str) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        sqlx::query(concat!(
            "UPDATE replicas SET heartbeat_us = ",
            db_now!(),
            " WHERE id = $1"
        ))
        .bind(me)
        .execute(pool)
        .await?;
        Ok(())
    })
    .await
}

/// A clean shutdown: nobody should wait for this replica's heartbeat to
/// go stale before treating its streams as gone.
pub async fn leave(pg: &Pg, me: &str) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let mut tx = pool.begin().await?;
        sqlx::query("DELETE FROM agent_streams WHERE replica = $1")
            .bind(me)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE replicas SET heartbeat_us = 0 WHERE id = $1")
            .bind(me)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    })
    .await
}

/// Forgets replicas silent for longer than `keep`, and the stream rows
/// they left (bounds the registry: an agent that moved keeps the dead
/// replica's row beside its new one until then).
pub async fn forget_replicas(pg: &Pg, keep: Duration) -> Result<u64, sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let mut tx = pool.begin().await?;
        let done = sqlx::query(concat!(
            "DELETE FROM replicas WHERE heartbeat_us < ",
            db_now!(),
            " - $1"
        ))
        .bind(dur_micros(keep))
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM agent_streams WHERE replica NOT IN (SELECT id FROM replicas)")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected())
    })
    .await
}

/// Rows per statement when claiming or releasing streams.
const STREAM_CHUNK: usize = 1000;

/// Records that `me` holds these agents' streams (since `at`), each with
/// whether its peer is restart-only.
pub async fn claim_streams(
    pg: &Pg,
    me: &str,
    agents: &[(String, crate::signals::peers::PeerKind)],
    at: Ts,
) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        for chunk in agents.chunks(STREAM_CHUNK) {
            let mut q = QueryBuilder::<Postgres>::new(
                "INSERT INTO agent_streams (agent, replica, since_us, restart_only, restart_wait_ms) ",
            );
            q.push_values(chunk, |mut r, (a, kind)| {
                r.push_bind(a.as_str())
                    .push_bind(me)
                    .push_bind(at.as_micros())
                    .push_bind(i64::from(kind.restart_only))
                    .push_bind(i64::try_from(kind.restart_wait.as_millis()).unwrap_or(i64::MAX));
            });
            // One row per (agent, replica): a sidecar streams to every
            // replica, and each keeps its own row.
            q.push(
                " ON CONFLICT (agent, replica) DO UPDATE SET since_us = EXCLUDED.since_us, \
             restart_only = EXCLUDED.restart_only, restart_wait_ms = EXCLUDED.restart_wait_ms",
            );
            q.build().execute(pool).await?;
        }
        Ok(())
    })
    .await
}

/// Forgets these agents' streams if `me` still holds them (another replica
/// may have taken one over since).
pub async fn release_streams(pg: &Pg, me: &str, agents: &[String]) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        for chunk in agents.chunks(STREAM_CHUNK) {
            sqlx::query("DELETE FROM agent_streams WHERE replica = $1 AND agent = ANY($2)")
                .bind(me)
                .bind(chunk)
                .execute(pool)
                .await?;
        }
        Ok(())
    })
    .await
}

/// Agent streams (agent, replica, restart-only, restart wait) held by replicas whose heartbeat is
/// younger than `$1` µs, and that pass the condition that follows.
macro_rules! live_streams {
    () => {
        concat!(
            "SELECT s.agent, s.replica, s.restart_only, s.restart_wait_ms FROM agent_streams s JOIN replicas r ON r.id = s.replica \
             WHERE r.heartbeat_us > ",
            db_now!(),
            " - $1 AND "
        )
    };
}

/// Which live replica holds each of `agents`' streams (those held by none,
/// or by a replica whose heartbeat is older than `lease`, are left out).
/// An agent streaming to several (a sidecar) is given one holder, the
/// newest stream: a signal relayed for it reaches exactly one.
pub async fn owners(
    pg: &Pg,
    agents: &[String],
    lease: Duration,
) -> Result<HashMap<String, Holder>, sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(concat!(
            live_streams!(),
            "s.agent = ANY($2) ORDER BY s.since_us, s.replica"
        ))
        .bind(dur_micros(lease))
        .bind(agents)
        .fetch_all(pool)
        .await?;
        Ok(holders(rows))
    })
    .await
}

/// One holder per agent: the last row of an agent's (rows come oldest
/// stream first) wins.
fn holders(rows: Vec<(String, String, i64, i64)>) -> HashMap<String, Holder> {
    rows.into_iter()
        .map(|(agent, replica, restart_only, wait_ms)| {
            (
                agent,
                Holder {
                    replica,
                    restart_only: restart_only != 0,
                    // Another replica's word, bounded as this one's is.
                    restart_wait: std::time::Duration::from_millis(wait_ms.max(0) as u64)
                        .min(crate::signals::hub::MAX_RESTART_WAIT),
                },
            )
        })
        .collect()
}

/// Every agent stream held by a live replica other than `me`.
pub async fn remote_streams(
    pg: &Pg,
    me: &str,
    lease: Duration,
) -> Result<HashMap<String, Holder>, sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(concat!(
            live_streams!(),
            "s.replica <> $2 ORDER BY s.since_us, s.replica"
        ))
        .bind(dur_micros(lease))
        .bind(me)
        .fetch_all(pool)
        .await?;
        Ok(holders(rows))
    })
    .await
}

/// The channel that wakes a replica holding an agent a signal is for.
pub const SIGNALS_CHANNEL: &str = "lifeline_signals";
/// The channel each replica sends itself a probe on, to know its
/// listening connection still hears (payload: the replica's name).
pub const PROBE_CHANNEL: &str = "lifeline_probe";

/// Sends `replica`'s listening connection a probe (see [`PROBE_CHANNEL`]).
pub async fn notify_probe(pg: &Pg, replica: &str) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async { notify(pool, PROBE_CHANNEL, replica).await })
        .await
}

/// Longest payload sent in one notification (PostgreSQL's bound is 8000).
const MAX_PAYLOAD: usize = 7000;

/// Wakes `replica` for the signals `ids`: payloads `<replica> <id>,<id>…`,
/// split to fit.
pub async fn notify_signals(pg: &Pg, replica: &str, ids: &[i64]) -> Result<(), sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
        let mut payload = String::new();
        for id in ids {
            if payload.len() > MAX_PAYLOAD {
                notify(pool, SIGNALS_CHANNEL, &payload).await?;
                payload.clear();
            }
            if payload.is_empty() {
                payload.push_str(replica);
                payload.push(' ');
            } else {
                payload.push(',');
            }
            payload.push_str(&id.to_string());
        }
        if !payload.is_empty() {
            notify(pool, SIGNALS_CHANNEL, &payload).await?;
        }
        Ok(())
    })
    .await
}

/// Reads a signals notification: the replica it is for and the ids.
pub fn parse_signals(payload: &str) -> Option<(&str, Vec<i64>)> {
    let (replica, ids) = payload.split_once(' ')?;
    let ids = ids
        .split(',')
        .map(str::parse)
        .collect::<Result<Vec<i64>, _>>()
        .ok()?;
    Some((replica, ids))
}

async fn notify(pool: &sqlx::PgPool, channel: &str, payload: &str) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel)
        .bind(payload)
        .execute(pool)
        .await?;
    Ok(())
}

/// Signals still `pending` or `delivered` become `timeout` once nobody can
/// answer for them any more: the replica that held their agent is gone, or
/// nobody ever did. An ordinary signal is swept when it was created before
/// `before`; a restart, whose ack waits for its agent to turn ready, only
/// once its own deadline (on the row) is `grace` past `now`. At most
/// `limit` per call.
pub async fn sweep_unanswered(
    pg: &Pg,
    before: Ts,
    (now, grace): (Ts, Duration),
    limit: i64,
) -> Result<u64, sqlx::Error> {
    let pool = &pg.pool;
    pg.bounded(async {
    let done = sqlx::query(
        "UPDATE signals SET outcome = 'timeout', \
           detail = 'no replica saw an ack before the deadline (the replica holding the agent is gone)' \
         WHERE id IN (SELECT id FROM signals WHERE outcome IN ('pending', 'delivered') \
                      AND ((restart = 0 AND created_us < $1) \
                        OR (restart = 1 AND deadline_us IS NOT NULL AND deadline_us < $3) \
                        OR (restart = 1 AND deadline_us IS NULL AND created_us < $1)) \
                      ORDER BY created_us LIMIT $2)",
    )
    .bind(before.as_micros())
    .bind(limit)
    .bind(now.saturating_sub(grace).as_micros())
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}).await
}

#[cfg(test)]
mod tests {
    use super::{holders, parse_signals};

    /// Another replica's word on a sidecar's restart wait is bounded as
    /// this one's is: a negative figure is none, a huge one an hour.
    #[test]
    fn a_restart_wait_read_from_another_replica_is_bounded() {
        let row = |agent: &str, wait_ms: i64| (agent.to_string(), "b".to_string(), 1, wait_ms);
        let h = holders(vec![
            row("neg", -5),
            row("huge", i64::MAX),
            row("fine", 330_000),
        ]);
        let wait = |a: &str| h[a].restart_wait;
        assert_eq!(wait("neg"), std::time::Duration::ZERO);
        assert_eq!(wait("huge"), crate::signals::hub::MAX_RESTART_WAIT);
        assert_eq!(wait("fine"), std::time::Duration::from_secs(330));
        assert!(h["fine"].restart_only);
    }

    #[test]
    fn a_signals_payload_names_its_replica_and_ids() {
        assert_eq!(parse_signals("r1 3,4,5"), Some(("r1", vec![3, 4, 5])));
        assert_eq!(parse_signals("r1 x"), None);
        assert_eq!(parse_signals("r1"), None);
    }
}
