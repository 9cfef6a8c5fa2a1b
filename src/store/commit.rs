//! One batch committed: the phases of its transaction (resources,
//! tunnels, history, episodes, incidents, then what was refused, then the
//! fence checked and COMMIT), written once and made for each engine by
//! [`phases!`]. With `isolate`, each statement runs in a savepoint of its
//! own and what the database refuses is recorded instead of failing the
//! batch. The writer's loop (retries, shedding, the split snapshot) is
//! `writer.rs`'s; this file only turns one batch into statements.

use std::collections::HashMap;

use sqlx::{Database, Encode, Postgres, QueryBuilder, Sqlite, Transaction, Type};

use super::batch::WriteBatch;
use super::bulk::{dialect, values_pieces, Dialect};
use super::lease::{CheckFence, Fence};
use super::outbox;
use super::{is_permanent, on_pool, Db};
use crate::clock::Ts;
use crate::domain::{text, ClusterName, HistoryEvent, Server, Subject, Tunnel, MAX_NAME_LEN};
use crate::domain::{EpisodeChange, HistoryEntry, IncidentRecord, Plan, ResourceChange};

/// Incidents whose previous rows one statement reads.
const MARKS_PER_READ: usize = 500;

/// What became of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    Written,
    /// Made under a lease this replica no longer holds: the new leader
    /// writes history now, and this batch is not committed.
    Fenced,
}

/// Commits one batch in one transaction, if its fence still holds.
pub async fn commit(
    db: &Db,
    cluster: &ClusterName,
    b: &WriteBatch,
) -> Result<Committed, sqlx::Error> {
    // Not isolating: nothing is refused row by row, so no time is needed
    // for refusals.
    commit_batch(db, cluster, b, false, Ts::ZERO)
        .await
        .map(|(c, _)| c)
}

/// A row the database refused for what it holds: recorded as rejected
/// (a history row of its own) while the rest of its batch commits.
#[derive(Clone, Debug)]
pub struct Refused {
    pub subject: Subject,
    pub name: String,
    pub table: &'static str,
    pub error: String,
}

impl Refused {
    fn new(subject: Subject, name: &str, table: &'static str, e: &sqlx::Error) -> Refused {
        Refused {
            subject,
            name: text::bounded(name, MAX_NAME_LEN),
            table,
            error: text::excerpt(&e.to_string()),
        }
    }

    /// The history row that records this refusal.
    fn history_row(&self, at: Ts) -> HistoryEntry {
        HistoryEntry {
            at,
            kind: self.subject,
            name: self.name.clone(),
            event: HistoryEvent::Rejected,
            expires: None,
            ttl_us: None,
            detail: format!(
                "the database refused this {} row: {}",
                self.table, self.error
            ),
        }
    }
}

/// Commits one batch of `cluster`'s rows in one transaction, if its fence
/// still holds. With `isolate`, row by row, each in a savepoint: what the database refuses
/// is returned (and recorded as rejected history in the same transaction,
/// at the batch's last history row or, with none, at `now`) and
/// everything else is written.
pub async fn commit_batch(
    db: &Db,
    cluster: &ClusterName,
    b: &WriteBatch,
    isolate: bool,
    now: Ts,
) -> Result<(Committed, Vec<Refused>), sqlx::Error> {
    // Whether the fence holds is decided last, just before COMMIT, where
    // a leader's check share-locks the lease row: held from the first
    // statement, that lock would keep the lease from being renewed for as
    // long as a large batch takes (and the leader would step down for it).
    if matches!(b.fence, Fence::Follower) {
        return Ok((Committed::Fenced, Vec::new()));
    }
    // SQLite: the write lock from the start. A batch whose first statement
    // reads (the incidents' rows before, for their events) would otherwise
    // fail its upgrade to a writer with `database is locked` whenever
    // another connection (a webhook's delivery log) wrote in between.
    let begin = match db {
        Db::Sqlite(_) => "BEGIN IMMEDIATE",
        Db::Postgres(_) => "BEGIN",
    };
    on_pool!(db, pool => {
        let mut tx = Phases {
            tx: pool.begin_with(begin).await?,
            sql: dialect(pool, cluster),
            refused: isolate.then(Vec::new),
        };
        tx.resources(b).await?;
        tx.tunnels(b).await?;
        tx.history(b).await?;
        tx.episodes(&b.episodes).await?;
        tx.incidents(b).await?;
        tx.finish(b, now).await
    })
}

/// One batch's transaction while its phases run.
struct Phases<DB: Database> {
    tx: Transaction<'static, DB>,
    sql: Dialect<DB>,
    /// `Some` while isolating (row by row, each in a savepoint): what the
    /// database refused so far.
    refused: Option<Vec<Refused>>,
}

impl<DB: Database> Phases<DB> {
    fn isolating(&self) -> bool {
        self.refused.is_some()
    }
}

/// Runs one statement on the transaction. Isolating (`refused` is
/// `Some`), it runs in a savepoint of its own: a statement the database
/// refuses for what it holds ([`is_permanent`]) is rolled back alone and
/// recorded; any other error fails the transaction as usual.
macro_rules! exec {
    ($self:ident, ($subject:expr, $name:expr, $table:literal), $q:expr) => {
        match $self.refused.as_mut() {
            None => {
                $q.execute(&mut *$self.tx).await?;
            }
            Some(refused) => {
                let mut sp = sqlx::Connection::begin(&mut *$self.tx).await?;
                match $q.execute(&mut *sp).await {
                    Ok(_) => sp.commit().await?,
                    Err(e) if is_permanent(&e) => {
                        sp.rollback().await?;
                        refused.push(Refused::new($subject, $name, $table, &e));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    };
}

/// The phases, written once for every engine: the statements are the
/// same text, but the transaction, the bulk dialect and the binds are each
/// engine's own types.
macro_rules! phases {
    ($db:ty) => {
        impl Phases<$db> {
            /// Whole-kind replacements, then each resource's latest row:
            /// whole, its expiry alone (in place where the engine can), or
            /// deleted.
            async fn resources(&mut self, b: &WriteBatch) -> Result<(), sqlx::Error> {
                let isolate = self.isolating();
                for (kind, rows) in &b.replace_servers {
                    sqlx::query("DELETE FROM resources WHERE cluster = $1 AND kind = $2")
                        .bind(self.sql.cluster())
                        .bind(kind.as_str())
                        .execute(&mut *self.tx)
                        .await?;
                    for chunk in self.sql.pieces(rows, isolate) {
                        exec!(self, (Subject::from(*kind), &chunk[0].name, "resources"),
                            self.sql.upsert_servers(chunk).build());
                    }
                }
                let (mut puts, mut expiries, mut dels): (Vec<&Server>, Vec<&Server>, Vec<_>) =
                    (Vec::new(), Vec::new(), Vec::new());
                for (key, row) in &b.servers {
                    match row {
                        ResourceChange::Put(s) => puts.push(s),
                        // Row by row, each written whole.
                        ResourceChange::Expiry(s) if isolate => puts.push(s),
                        ResourceChange::Expiry(s) => expiries.push(s),
                        ResourceChange::Delete => dels.push(key),
                    }
                }
                for chunk in self.sql.pieces(&puts, isolate) {
                    exec!(self, (Subject::from(chunk[0].kind), &chunk[0].name, "resources"),
                        self.sql.upsert_servers(chunk).build());
                }
                self.sql.write_expiries(&mut self.tx, &expiries).await?;
                for (kind, name) in dels {
                    exec!(self, (Subject::from(*kind), name, "resources"),
                        sqlx::query("DELETE FROM resources WHERE cluster = $1 AND kind = $2 AND name = $3")
                            .bind(self.sql.cluster())
                            .bind(kind.as_str())
                            .bind(name.as_str()));
                }
                Ok(())
            }

            /// The tunnels' replacement, then each tunnel's latest row.
            async fn tunnels(&mut self, b: &WriteBatch) -> Result<(), sqlx::Error> {
                let isolate = self.isolating();
                if let Some(rows) = &b.replace_tunnels {
                    sqlx::query("DELETE FROM tunnels WHERE cluster = $1")
                        .bind(self.sql.cluster())
                        .execute(&mut *self.tx)
                        .await?;
                    for chunk in self.sql.pieces(rows, isolate) {
                        exec!(self, (Subject::TunnelConnection, &chunk[0].name, "tunnels"),
                            self.sql.upsert_tunnels(chunk).build());
                    }
                }
                let (puts, dels): (Vec<_>, Vec<_>) =
                    b.tunnels.iter().partition(|(_, v)| v.is_some());
                let puts: Vec<&Tunnel> = puts.into_iter().filter_map(|(_, v)| v.as_ref()).collect();
                for chunk in self.sql.pieces(&puts, isolate) {
                    exec!(self, (Subject::TunnelConnection, &chunk[0].name, "tunnels"),
                        self.sql.upsert_tunnels(chunk).build());
                }
                for (name, _) in dels {
                    exec!(self, (Subject::TunnelConnection, name, "tunnels"),
                        sqlx::query("DELETE FROM tunnels WHERE cluster = $1 AND name = $2")
                            .bind(self.sql.cluster())
                            .bind(name.as_str()));
                }
                Ok(())
            }

            /// History rows, health transitions, the minute's censuses, the
            /// agents that moved between incidents and the signals each counts.
            async fn history(&mut self, b: &WriteBatch) -> Result<(), sqlx::Error> {
                let isolate = self.isolating();
                if isolate {
                    for chunk in self.sql.pieces(&b.events, true) {
                        exec!(self, (chunk[0].kind, &chunk[0].name, "events"),
                            self.sql.insert_events(chunk).build());
                    }
                } else {
                    self.sql.write_events(&mut self.tx, &b.events).await?;
                }
                for chunk in values_pieces(&b.health, isolate) {
                    let mut q = QueryBuilder::new(
                        "INSERT INTO health_transitions (cluster, auth_server, addr, at_us, from_status, to_status, mode, detail) ",
                    );
                    let cluster = self.sql.cluster();
                    q.push_values(chunk, |mut r, h| {
                        r.push_bind(cluster)
                            .push_bind(h.auth_server.as_str())
                            .push_bind(h.addr.as_str())
                            .push_bind(h.at.as_micros())
                            .push_bind(h.from)
                            .push_bind(h.to)
                            .push_bind(h.mode)
                            .push_bind(h.detail.as_str());
                    });
                    exec!(self, (Subject::AuthServer, &chunk[0].auth_server, "health_transitions"),
                        q.build());
                }
                for chunk in values_pieces(&b.samples, isolate) {
                    let mut q =
                        QueryBuilder::new("INSERT INTO samples (cluster, at_us, agents, stranded, degraded) ");
                    let cluster = self.sql.cluster();
                    q.push_values(chunk, |mut r, s| {
                        r.push_bind(cluster)
                            .push_bind(s.at.as_micros())
                            .push_bind(i64::from(s.agents))
                            .push_bind(i64::from(s.stranded))
                            .push_bind(i64::from(s.degraded));
                    });
                    q.push(
                        " ON CONFLICT (cluster, at_us) DO UPDATE SET agents = excluded.agents, \
                         stranded = excluded.stranded, degraded = excluded.degraded",
                    );
                    exec!(self, (Subject::Store, "samples", "samples"), q.build());
                }
                for chunk in values_pieces(&b.moves, isolate) {
                    let mut q = QueryBuilder::new(
                        "INSERT INTO incident_moves (episode_id, agent, from_incident, to_incident, at_us) ",
                    );
                    q.push_values(chunk, |mut r, m| {
                        r.push_bind(m.episode)
                            .push_bind(m.agent.as_str())
                            .push_bind(m.from)
                            .push_bind(m.to)
                            .push_bind(m.at.as_micros());
                    });
                    exec!(self, (Subject::Agent, &chunk[0].agent, "incident_moves"), q.build());
                }
                // Signals counted toward an incident (its `signals` figure,
                // written in this same transaction) are marked as its own:
                // one statement per incident and piece of ids, not per
                // signal (a storm signals thousands at once).
                let mut by_incident: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
                for a in &b.attributions {
                    by_incident.entry(a.incident).or_default().push(a.signal);
                }
                // Their rows locked first, all at once in id order (the
                // order every other writer of signals takes them).
                let mut ids: Vec<i64> = b.attributions.iter().map(|a| a.signal).collect();
                ids.sort_unstable();
                ids.dedup();
                self.sql.lock_signals(&mut self.tx, &ids).await?;
                for (incident, ids) in &by_incident {
                    for chunk in values_pieces(ids, isolate) {
                        let mut q = QueryBuilder::new("UPDATE signals SET incident_id = ");
                        q.push_bind(*incident).push(" WHERE id IN (");
                        let mut sep = q.separated(", ");
                        for id in chunk {
                            sep.push_bind(*id);
                        }
                        q.push(")");
                        exec!(self, (Subject::Store, &format!("signal {}", chunk[0]), "signals"), q.build());
                    }
                }
                Ok(())
            }

            /// Episodes opened, updated and closed, in order.
            async fn episodes(&mut self, changes: &[EpisodeChange]) -> Result<(), sqlx::Error> {
                for op in changes {
                    match op {
                        EpisodeChange::Open {
                            id,
                            agent,
                            state,
                            reasons,
                            cause,
                            started,
                            incident,
                        } => {
                            exec!(self, (Subject::Agent, agent, "episodes"),
                            sqlx::query(
                                "INSERT INTO episodes (id, agent, state, reasons, cause, cause_resource, started_us, incident_id, cluster) \
                                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                            )
                            .bind(id)
                            .bind(agent.as_str())
                            .bind(*state)
                            .bind(reasons.as_str())
                            .bind(cause.as_ref().map_or("", |c| c.kind.as_str()))
                            .bind(cause.as_ref().map_or("", |c| c.resource.as_str()))
                            .bind(started.as_micros())
                            .bind(*incident)
                            .bind(self.sql.cluster()));
                        }
                        EpisodeChange::Update {
                            id,
                            reasons,
                            cause,
                            incident,
                        } => {
                            exec!(self, (Subject::Agent, &format!("episode {id}"), "episodes"),
                            sqlx::query(
                                "UPDATE episodes SET reasons = $1, cause = $2, cause_resource = $3, incident_id = $4 WHERE id = $5",
                            )
                            .bind(reasons.as_str())
                            .bind(cause.as_ref().map_or("", |c| c.kind.as_str()))
                            .bind(cause.as_ref().map_or("", |c| c.resource.as_str()))
                            .bind(*incident)
                            .bind(id));
                        }
                        EpisodeChange::Close {
                            id,
                            ended,
                            ended_by_signal,
                            end_reason,
                        } => {
                            exec!(self, (Subject::Agent, &format!("episode {id}"), "episodes"),
                            sqlx::query(
                                "UPDATE episodes SET ended_us = $1, ended_by_signal = $2, end_reason = $3 WHERE id = $4",
                            )
                            .bind(ended.as_micros())
                            .bind(*ended_by_signal)
                            .bind(*end_reason)
                            .bind(id));
                        }
                    }
                }
                Ok(())
            }

            /// Each incident's latest record, and the events its change
            /// tells (opened, updated, resolved) into the outbox, in this
            /// same transaction: what was written is told, and nothing
            /// else.
            async fn incidents(&mut self, b: &WriteBatch) -> Result<(), sqlx::Error> {
                let incidents: Vec<&IncidentRecord> = b.incidents.values().collect();
                if incidents.is_empty() {
                    return Ok(());
                }
                let mut before = HashMap::new();
                let ids: Vec<i64> = incidents.iter().map(|r| r.id).collect();
                for part in ids.chunks(MARKS_PER_READ) {
                    let rows: Vec<outbox::MarkRow> =
                        outbox::marks_query(part).build_query_as().fetch_all(&mut *self.tx).await?;
                    before.extend(rows.into_iter().map(outbox::MarkRow::into_mark));
                }
                for chunk in values_pieces(&incidents, self.isolating()) {
                    exec!(self, (Subject::Store, &format!("incident {}", chunk[0].id), "incidents"),
                        upsert_incidents(self.sql.cluster(), chunk).build());
                }
                let events = outbox::incident_events(self.sql.cluster_name(), &before, &incidents, b.events.last().map(|e| e.at));
                if !events.is_empty() {
                    self.sql.lock_outbox(&mut self.tx).await?;
                }
                for chunk in values_pieces(&events, self.isolating()) {
                    exec!(self, (Subject::Store, &format!("{} event", chunk[0].kind), "notify_events"),
                        outbox::insert_events(chunk).build());
                }
                Ok(())
            }

            /// What was refused becomes history of its own, in words the
            /// database takes (names and errors cleaned and bounded); then
            /// COMMIT, if the batch's fence still holds.
            async fn finish(
                mut self,
                b: &WriteBatch,
                now: Ts,
            ) -> Result<(Committed, Vec<Refused>), sqlx::Error> {
                let refused = self.refused.take().unwrap_or_default();
                if !refused.is_empty() {
                    let at = b.events.last().map_or(now, |e| e.at);
                    let rows: Vec<HistoryEntry> = refused.iter().map(|r| r.history_row(at)).collect();
                    self.sql.write_events(&mut self.tx, &rows).await?;
                }
                if !self.tx.holds(&b.fence).await? {
                    return Ok((Committed::Fenced, Vec::new()));
                }
                self.tx.commit().await?;
                Ok((Committed::Written, refused))
            }
        }
    };
}

phases!(Sqlite);
phases!(Postgres);

fn upsert_incidents<DB: Database>(cluster: &str, rows: &[&IncidentRecord]) -> QueryBuilder<DB>
where
    DB::Arguments: Default,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
    for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
{
    let mut q = QueryBuilder::new(
        "INSERT INTO incidents (cluster, id, cause, resource, started_us, ended_us, peak_stranded, peak_degraded, \
         peak_planned, agents, signals, stranded_us, degraded_us, planned_us, recover_p50_us, recover_max_us, planned, window_id) ",
    );
    q.push_values(rows, |mut r, i| {
        r.push_bind(cluster)
            .push_bind(i.id)
            .push_bind(i.cause.as_str())
            .push_bind(i.resource.as_str())
            .push_bind(i.started.as_micros())
            .push_bind(i.ended.map(Ts::as_micros))
            .push_bind(i64::from(i.peak_stranded))
            .push_bind(i64::from(i.peak_degraded))
            .push_bind(i64::from(i.peak_planned))
            .push_bind(i64::from(i.agents))
            .push_bind(i64::from(i.signals))
            .push_bind(i.stranded_us)
            .push_bind(i.degraded_us)
            .push_bind(i.planned_us)
            .push_bind(i.recover_p50_us)
            .push_bind(i.recover_max_us)
            .push_bind(i.planned.map(Plan::kind))
            .push_bind(i.planned.and_then(Plan::window));
    });
    q.push(
        " ON CONFLICT (id) DO UPDATE SET cause = excluded.cause, resource = excluded.resource, \
         started_us = excluded.started_us, ended_us = excluded.ended_us, \
         peak_stranded = excluded.peak_stranded, peak_degraded = excluded.peak_degraded, \
         peak_planned = excluded.peak_planned, agents = excluded.agents, signals = excluded.signals, stranded_us = excluded.stranded_us, \
         degraded_us = excluded.degraded_us, planned_us = excluded.planned_us, \
         recover_p50_us = excluded.recover_p50_us, recover_max_us = excluded.recover_max_us, \
         planned = excluded.planned, window_id = excluded.window_id",
    );
    q
}
