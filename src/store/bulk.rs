//! The writer's multi-row statements for the hot tables (resources,
//! tunnels, history), one dialect per engine.
//!
//! SQLite takes `INSERT … VALUES (…), (…)` with a bound parameter per cell,
//! in statements whose sizes come from a fixed set (so each text stays in
//! the connection's statement cache). PostgreSQL takes one array per
//! column, unpacked by `UNNEST`: one statement text for any number of rows,
//! ten parameters instead of thousands to bind and plan, and the rows
//! travel in PostgreSQL's binary array format. The rows written are the
//! same; a test runs the writer on both engines.
//!
//! Owns: the statement text and binding. Must not touch: transactions,
//! fences or retries (the writer's).

use std::borrow::Borrow;
use std::marker::PhantomData;

use sqlx::{Pool, Postgres, QueryBuilder, Sqlite, Transaction};

use crate::clock::{dur_micros, Ts};
use crate::domain::{ClusterName, HistoryEntry};
use crate::domain::{Server, Tunnel};

/// Rows per SQLite statement (well below its 32766 bound parameters). A
/// power of two: see [`Pieces`].
pub(super) const SQLITE_ROWS: usize = 512;
/// Rows per PostgreSQL statement: bounds one statement's arrays (a few MB
/// at most), not its text, which is the same for any count.
pub(super) const POSTGRES_ROWS: usize = 8192;

/// History rows from which a batch goes by `COPY`. A COPY ends with two
/// messages in a row (the last data, then its end), and sqlx leaves Nagle's
/// algorithm on: the second waits for the server's delayed ACK, up to
/// 40 ms. From this many rows, what COPY saves per row outweighs that
/// wait: in the writer, with `bench ingest --postgres`, a history row took
/// about 4 µs by COPY against 7–12 µs by an `UNNEST` insert of 8 k–32 k
/// rows (array building, binding and parsing on both sides). Below it,
/// every batch is one round trip per statement.
pub(super) const COPY_MIN_ROWS: usize = 8 * 1024;

/// The statements of one engine, chosen by the pool's type, for one
/// cluster's rows: every row they write names it.
pub(super) struct Dialect<DB> {
    cluster: ClusterName,
    engine: PhantomData<DB>,
}

impl<DB> Dialect<DB> {
    /// The cluster whose rows it writes.
    pub fn cluster_name(&self) -> &ClusterName {
        &self.cluster
    }

    /// That cluster's name, as every row binds it.
    pub fn cluster(&self) -> &str {
        self.cluster.as_str()
    }
}

pub(super) fn dialect<DB: sqlx::Database>(_: &Pool<DB>, cluster: &ClusterName) -> Dialect<DB> {
    Dialect {
        cluster: cluster.clone(),
        engine: PhantomData,
    }
}

/// Rows cut into statements: up to `cap` rows each; with `halving`, the
/// rest in halving powers of two, so each statement's text comes from a
/// set of ten per table that the statement cache keeps prepared (a tail
/// of any length would be a new text, parsed and planned again, in nearly
/// every batch).
pub(super) struct Pieces<'a, T> {
    rows: &'a [T],
    cap: usize,
    halving: bool,
}

impl<'a, T> Iterator for Pieces<'a, T> {
    type Item = &'a [T];

    fn next(&mut self) -> Option<&'a [T]> {
        if self.rows.is_empty() {
            return None;
        }
        let n = if self.halving {
            self.cap.min(1 << self.rows.len().ilog2())
        } else {
            self.cap.min(self.rows.len())
        };
        let (head, tail) = self.rows.split_at(n);
        self.rows = tail;
        Some(head)
    }
}

/// Statements of `VALUES` rows, as SQLite takes every table and PostgreSQL
/// the small ones: `SQLITE_ROWS` each (or 1, row by row when a batch is
/// isolating a refused row), the rest halving.
pub(super) fn values_pieces<T>(rows: &[T], isolate: bool) -> Pieces<'_, T> {
    Pieces {
        rows,
        cap: if isolate { 1 } else { SQLITE_ROWS },
        halving: true,
    }
}

impl Dialect<Sqlite> {
    /// The outbox's write lock: SQLite's one writer already orders every
    /// transaction (see `outbox::OUTBOX_LOCK`).
    pub async fn lock_outbox(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// The signal rows a batch marks, locked first: SQLite's one writer
    /// already orders every transaction.
    pub async fn lock_signals(
        &self,
        _tx: &mut Transaction<'static, Sqlite>,
        _ids: &[i64],
    ) -> Result<(), sqlx::Error> {
        Ok(())
    }

    /// History rows, in `VALUES` statements.
    pub async fn write_events(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        rows: &[HistoryEntry],
    ) -> Result<(), sqlx::Error> {
        for chunk in self.pieces(rows, false) {
            self.insert_events(chunk).build().execute(&mut **tx).await?;
        }
        Ok(())
    }

    pub fn pieces<'a, T>(&self, rows: &'a [T], isolate: bool) -> Pieces<'a, T> {
        values_pieces(rows, isolate)
    }

    /// Resources whose expiry alone moved: written whole, as any other.
    pub async fn write_expiries(
        &self,
        tx: &mut Transaction<'static, Sqlite>,
        rows: &[&Server],
    ) -> Result<(), sqlx::Error> {
        for chunk in self.pieces(rows, false) {
            self.upsert_servers(chunk)
                .build()
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    pub fn insert_events(&self, rows: &[HistoryEntry]) -> QueryBuilder<Sqlite> {
        let mut q = QueryBuilder::new(
            "INSERT INTO events (cluster, at_us, kind, name, event, expires_us, ttl_us, detail) ",
        );
        let cluster = self.cluster.as_str();
        q.push_values(rows, |mut r, e| {
            r.push_bind(cluster)
                .push_bind(e.at.as_micros())
                .push_bind(e.kind)
                .push_bind(e.name.as_str())
                .push_bind(e.event)
                .push_bind(e.expires.map(Ts::as_micros))
                .push_bind(e.ttl_us)
                .push_bind(e.detail.as_str());
        });
        q
    }

    pub fn upsert_servers<R: Borrow<Server>>(&self, rows: &[R]) -> QueryBuilder<Sqlite> {
        let mut q = QueryBuilder::new(
            "INSERT INTO resources (cluster, kind, name, addr, version, group_id, group_generation, expires_us, ttl_us, labels, auth_server) ",
        );
        let cluster = self.cluster.as_str();
        q.push_values(rows, |mut r, s| {
            let s: &Server = s.borrow();
            r.push_bind(cluster)
                .push_bind(s.kind.as_str())
                .push_bind(s.name.as_str())
                .push_bind(s.addr.as_str())
                .push_bind(s.version.as_str())
                .push_bind(s.group_id.as_str())
                .push_bind(generation(s))
                .push_bind(s.expires.as_micros())
                .push_bind(dur_micros(s.ttl))
                .push_bind(s.labels.json())
                .push_bind(s.auth_server.as_str());
        });
        q.push(SERVERS_CONFLICT);
        q
    }

    pub fn upsert_tunnels<R: Borrow<Tunnel>>(&self, rows: &[R]) -> QueryBuilder<Sqlite> {
        let mut q = QueryBuilder::new(
            "INSERT INTO tunnels (cluster, name, agent, proxy, last_heartbeat_us, expires_us) ",
        );
        let cluster = self.cluster.as_str();
        q.push_values(rows, |mut r, t| {
            let t: &Tunnel = t.borrow();
            r.push_bind(cluster)
                .push_bind(t.name.as_str())
                .push_bind(t.agent.as_str())
                .push_bind(t.proxy.as_str())
                .push_bind(t.last_heartbeat.map(Ts::as_micros))
                .push_bind(t.expires.map(Ts::as_micros));
        });
        q.push(TUNNELS_CONFLICT);
        q
    }
}

/// Joins by index alone, until the transaction ends (see
/// [`Dialect::write_expiries`]).
const NO_HASH_JOIN: &str = "SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off";

impl Dialect<Postgres> {
    /// Locks the signal rows `ids` (sorted) until the transaction ends, in
    /// one statement, in ascending id order. Every transaction that
    /// updates several signal rows (these marks, and `signals::update`'s
    /// deliveries and answers) takes them in that order: two that each
    /// held a row the other wanted deadlocked, PostgreSQL broke the cycle
    /// after `deadlock_timeout` by failing one, and a writer that kept
    /// meeting acks fell behind.
    pub async fn lock_signals(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        ids: &[i64],
    ) -> Result<(), sqlx::Error> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query("SELECT id FROM signals WHERE id = ANY($1) ORDER BY id FOR UPDATE")
            .bind(ids)
            .execute(&mut **tx)
            .await
            .map(|_| ())
    }

    /// Takes `outbox::OUTBOX_LOCK` until the transaction ends.
    pub async fn lock_outbox(
        &self,
        tx: &mut Transaction<'static, Postgres>,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(super::outbox::LOCK_OUTBOX)
            .bind(super::outbox::OUTBOX_LOCK)
            .execute(&mut **tx)
            .await
            .map(|_| ())
    }

    /// History rows: many by one binary `COPY` (no statement to plan, no
    /// executor per row; a row the database refuses fails the whole COPY
    /// and the writer then goes row by row), fewer by `UNNEST` inserts.
    pub async fn write_events(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        rows: &[HistoryEntry],
    ) -> Result<(), sqlx::Error> {
        if rows.len() < COPY_MIN_ROWS {
            for chunk in self.pieces(rows, false) {
                self.insert_events(chunk).build().execute(&mut **tx).await?;
            }
            return Ok(());
        }
        let mut copy = tx
            .copy_in_raw(
                "COPY events (cluster, at_us, kind, name, event, expires_us, ttl_us, detail) \
                 FROM STDIN (FORMAT binary)",
            )
            .await?;
        let mut out = CopyBinary::start();
        let mut chunks = rows.chunks(POSTGRES_ROWS).peekable();
        while let Some(chunk) = chunks.next() {
            for e in chunk {
                out.row(8);
                out.text(self.cluster.as_str());
                out.int8(Some(e.at.as_micros()));
                out.text(e.kind.as_str());
                out.text(&e.name);
                out.text(e.event.as_str());
                out.int8(e.expires.map(Ts::as_micros));
                out.int8(e.ttl_us);
                out.text(&e.detail);
            }
            if chunks.peek().is_none() {
                // The trailer rides with the last rows: a write of its own
                // would be a small segment behind unacknowledged data,
                // which Nagle's algorithm holds for the server's ACK.
                out.end();
            }
            copy.send(out.take()).await?;
        }
        copy.finish().await?;
        Ok(())
    }

    pub fn pieces<'a, T>(&self, rows: &'a [T], isolate: bool) -> Pieces<'a, T> {
        Pieces {
            rows,
            cap: if isolate { 1 } else { POSTGRES_ROWS },
            halving: false,
        }
    }

    /// Resources whose expiry alone moved: those two columns updated in
    /// place, four arrays sent instead of ten and no row lock taken (an
    /// upsert locks the row it conflicts with, then updates it). A piece
    /// that finds fewer rows than it names (one the database refused
    /// before, say) is written whole.
    ///
    /// Each piece finds its rows through the primary key. Left to itself,
    /// the planner hashes the whole table for every piece (a piece of
    /// 5 000 rows against 100 k resources: a sequential scan and a hash
    /// of every row, 80 ms where the index takes 30), so hash and merge
    /// joins are off for the rest of this transaction, whose other
    /// statements join nothing.
    pub async fn write_expiries(
        &self,
        tx: &mut Transaction<'static, Postgres>,
        rows: &[&Server],
    ) -> Result<(), sqlx::Error> {
        if rows.is_empty() {
            return Ok(());
        }
        sqlx::raw_sql(NO_HASH_JOIN).execute(&mut **tx).await?;
        for chunk in self.pieces(rows, false) {
            let updated = self
                .update_expiries(chunk)
                .build()
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if updated < chunk.len() as u64 {
                self.upsert_servers(chunk)
                    .build()
                    .execute(&mut **tx)
                    .await?;
            }
        }
        Ok(())
    }

    pub fn update_expiries(&self, rows: &[&Server]) -> QueryBuilder<Postgres> {
        let mut q = QueryBuilder::new(
            "UPDATE resources AS r SET expires_us = u.expires_us, ttl_us = u.ttl_us \
             FROM UNNEST(",
        );
        q.push_bind(column(rows, |s| s.kind.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |s| s.name.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |s| s.expires.as_micros()))
            .push("::int8[], ")
            .push_bind(column(rows, |s| dur_micros(s.ttl)))
            .push(
                "::int8[]) AS u (kind, name, expires_us, ttl_us) \
                 WHERE r.cluster = ",
            )
            .push_bind(self.cluster.as_str())
            .push(" AND r.kind = u.kind AND r.name = u.name");
        q
    }

    pub fn insert_events(&self, rows: &[HistoryEntry]) -> QueryBuilder<Postgres> {
        let mut q = QueryBuilder::new(
            "INSERT INTO events (cluster, at_us, kind, name, event, expires_us, ttl_us, detail) \
             SELECT ",
        );
        q.push_bind(self.cluster.as_str())
            .push("::text, * FROM UNNEST(")
            .push_bind(column(rows, |e| e.at.as_micros()))
            .push("::int8[], ")
            .push_bind(column(rows, |e| e.kind.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |e| e.name.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |e| e.event.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |e| e.expires.map(Ts::as_micros)))
            .push("::int8[], ")
            .push_bind(column(rows, |e| e.ttl_us))
            .push("::int8[], ")
            .push_bind(column(rows, |e| e.detail.as_str()))
            .push("::text[])");
        q
    }

    pub fn upsert_servers<R: Borrow<Server>>(&self, rows: &[R]) -> QueryBuilder<Postgres> {
        let mut q = QueryBuilder::new(
            "INSERT INTO resources (cluster, kind, name, addr, version, group_id, group_generation, expires_us, ttl_us, labels, auth_server) \
             SELECT ",
        );
        q.push_bind(self.cluster.as_str())
            .push("::text, * FROM UNNEST(")
            .push_bind(column(rows, |r| srv(r).kind.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| srv(r).name.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| srv(r).addr.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| srv(r).version.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| srv(r).group_id.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| generation(srv(r))))
            .push("::int8[], ")
            .push_bind(column(rows, |r| srv(r).expires.as_micros()))
            .push("::int8[], ")
            .push_bind(column(rows, |r| dur_micros(srv(r).ttl)))
            .push("::int8[], ")
            .push_bind(column(rows, |r| srv(r).labels.json()))
            .push("::text[], ")
            .push_bind(column(rows, |r| srv(r).auth_server.as_str()))
            .push("::text[])");
        q.push(SERVERS_CONFLICT);
        q
    }

    pub fn upsert_tunnels<R: Borrow<Tunnel>>(&self, rows: &[R]) -> QueryBuilder<Postgres> {
        let mut q = QueryBuilder::new(
            "INSERT INTO tunnels (cluster, name, agent, proxy, last_heartbeat_us, expires_us) \
             SELECT ",
        );
        q.push_bind(self.cluster.as_str())
            .push("::text, * FROM UNNEST(")
            .push_bind(column(rows, |r| tun(r).name.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| tun(r).agent.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| tun(r).proxy.as_str()))
            .push("::text[], ")
            .push_bind(column(rows, |r| tun(r).last_heartbeat.map(Ts::as_micros)))
            .push("::int8[], ")
            .push_bind(column(rows, |r| tun(r).expires.map(Ts::as_micros)))
            .push("::int8[])");
        q.push(TUNNELS_CONFLICT);
        q
    }
}

const SERVERS_CONFLICT: &str =
    " ON CONFLICT (cluster, kind, name) DO UPDATE SET addr = excluded.addr, \
     version = excluded.version, group_id = excluded.group_id, \
     group_generation = excluded.group_generation, expires_us = excluded.expires_us, \
     ttl_us = excluded.ttl_us, labels = excluded.labels, auth_server = excluded.auth_server";

const TUNNELS_CONFLICT: &str =
    " ON CONFLICT (cluster, name) DO UPDATE SET agent = excluded.agent, \
     proxy = excluded.proxy, last_heartbeat_us = excluded.last_heartbeat_us, \
     expires_us = excluded.expires_us";

/// PostgreSQL's binary `COPY` format: a header, then per row its field
/// count and each field as a length (-1 for NULL) and its bytes in network
/// order, then a trailer.
struct CopyBinary {
    buf: Vec<u8>,
}

impl CopyBinary {
    fn start() -> CopyBinary {
        let mut buf = Vec::with_capacity(64 * 1024);
        buf.extend_from_slice(b"PGCOPY\n\xff\r\n\0");
        buf.extend_from_slice(&0i32.to_be_bytes()); // flags: no OIDs
        buf.extend_from_slice(&0i32.to_be_bytes()); // no header extension
        CopyBinary { buf }
    }

    fn row(&mut self, fields: i16) {
        self.buf.extend_from_slice(&fields.to_be_bytes());
    }

    fn int8(&mut self, v: Option<i64>) {
        match v {
            Some(v) => {
                self.buf.extend_from_slice(&8i32.to_be_bytes());
                self.buf.extend_from_slice(&v.to_be_bytes());
            }
            None => self.buf.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    /// Text as its UTF-8 bytes. Lengths are bounded well below 2 GiB by
    /// validation; one that is not goes as NULL, which the NOT NULL column
    /// refuses (and the writer isolates the row).
    fn text(&mut self, s: &str) {
        match i32::try_from(s.len()) {
            Ok(n) => {
                self.buf.extend_from_slice(&n.to_be_bytes());
                self.buf.extend_from_slice(s.as_bytes());
            }
            Err(_) => self.buf.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }

    fn end(&mut self) {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
    }

    fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }
}

/// One column of `rows`, for an array parameter.
fn column<'a, R, T>(rows: &'a [R], f: impl Fn(&'a R) -> T) -> Vec<T> {
    rows.iter().map(f).collect()
}

fn srv<R: Borrow<Server>>(r: &R) -> &Server {
    r.borrow()
}

fn tun<R: Borrow<Tunnel>>(r: &R) -> &Tunnel {
    r.borrow()
}

/// A group generation as the database's signed 64 bits (saturating).
fn generation(s: &Server) -> i64 {
    i64::try_from(s.group_generation).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::{values_pieces, Pieces, SQLITE_ROWS};

    /// Guards SQLite's statement cache: every row is written once, in
    /// order, and the statement sizes come from a fixed set of ten.
    #[test]
    fn values_pieces_cover_every_row_in_sizes_from_a_fixed_set() {
        let mut sizes = std::collections::BTreeSet::new();
        for n in [0, 1, 2, 3, 511, 512, 513, 1000, 1537, 5000] {
            let rows: Vec<usize> = (0..n).collect();
            let parts: Vec<&[usize]> = values_pieces(&rows, false).collect();
            assert_eq!(values_pieces(&rows, true).count(), n, "row by row");
            assert_eq!(parts.concat(), rows, "{n} rows");
            sizes.extend(parts.iter().map(|p| p.len()));
        }
        assert!(sizes
            .iter()
            .all(|s| s.is_power_of_two() && *s <= SQLITE_ROWS));
        assert!(sizes.len() <= 10, "{sizes:?}");
    }

    /// Without halving (one text for any count), statements are full but
    /// for the last.
    #[test]
    fn plain_pieces_are_full_but_the_last() {
        let rows: Vec<usize> = (0..10).collect();
        let parts: Vec<&[usize]> = Pieces {
            rows: &rows,
            cap: 4,
            halving: false,
        }
        .collect();
        assert_eq!(parts, vec![&rows[0..4], &rows[4..8], &rows[8..10]]);
    }
}
