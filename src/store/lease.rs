//! The leader lease as the store sees it: the fence every batch carries
//! and the writer checks in its transaction, who leads as this replica
//! last saw it, and the channel that says a setting changed. The lease
//! loop and its SQL are the replica room's (`replica::lease`).

use std::sync::Arc;

use serde::Serialize;
use sqlx::{Postgres, Sqlite, Transaction};

use crate::clock::Ts;

/// Who may write history, carried by every batch the fleet hands the
/// writer: the writer commits a batch only under the fence it was made
/// under, checked in the same transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Fence {
    /// The only process on its database (SQLite): nothing to fence.
    #[default]
    Sole,
    /// The leader of `term`: a write commits only while the lease row
    /// still names this replica and this term. Its deadline is not checked:
    /// a lease that lapsed with nobody taking it is still this tenure's
    /// (see `replica::lease::try_lead`), and whoever takes it brings a new term.
    Leader { replica: Arc<str>, term: i64 },
    /// Not the leader: history is the leader's to write.
    Follower,
}

/// Who leads, as this replica last saw it (what the dashboard, the API
/// and the signal loops read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Leadership {
    /// This replica's name.
    pub replica: String,
    /// The leader's name; `None` while nobody holds the lease.
    pub leader: Option<String>,
    /// The leader's term (grows with every new tenure).
    pub term: i64,
    /// This replica leads: it writes history and sends automatic signals.
    pub leading: bool,
    /// One process on its own database (SQLite): it always leads.
    pub sole: bool,
    /// When this replica last changed role.
    pub since: Option<Ts>,
    /// While leading: the monotonic instant past which it must not act
    /// without another renewal (moved at every renewal without waking
    /// anyone). A leader that was paused finds it passed on waking.
    #[serde(skip)]
    #[schema(ignore)]
    pub valid_until: Option<tokio::time::Instant>,
}

impl Leadership {
    /// Whether this replica may act as leader at the monotonic instant
    /// `now`: it leads, alone on its database or within its validity.
    pub fn acting(&self, now: tokio::time::Instant) -> bool {
        self.leading && (self.sole || self.valid_until.is_some_and(|v| now < v))
    }

    /// The fence what this replica writes as leader goes under, while it
    /// may act as one ([`Self::acting`]).
    pub fn acting_fence(&self, now: tokio::time::Instant) -> Option<Fence> {
        if !self.acting(now) {
            return None;
        }
        Some(if self.sole {
            Fence::Sole
        } else {
            Fence::Leader {
                replica: self.replica.as_str().into(),
                term: self.term,
            }
        })
    }

    /// A process alone on its database: it leads from the start.
    pub fn sole(name: &str, now: Ts) -> Leadership {
        Leadership {
            leader: Some(name.to_string()),
            leading: true,
            sole: true,
            ..Leadership::follower(name, now)
        }
    }

    /// One replica among several, until the lease loop has looked.
    pub fn follower(name: &str, now: Ts) -> Leadership {
        Leadership {
            replica: name.to_string(),
            leader: None,
            term: 0,
            leading: false,
            sole: false,
            since: Some(now),
            valid_until: None,
        }
    }
}

/// Checks, inside a writer's transaction and just before its COMMIT, that
/// `me` still leads in `term` (the fencing token: a new tenure always
/// brings a new term); the row stays share-locked until the transaction
/// ends, so the lease cannot change hands before this transaction commits,
/// and a renewal waits for no more than the COMMIT itself.
pub async fn still_leads(
    tx: &mut Transaction<'static, Postgres>,
    me: &str,
    term: i64,
) -> Result<bool, sqlx::Error> {
    let held: Option<i64> = sqlx::query_scalar(
        "SELECT term FROM leader_lease WHERE id = 1 AND holder = $1 AND term = $2 FOR SHARE",
    )
    .bind(me)
    .bind(term)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(held.is_some())
}

/// The channel that tells every replica a setting changed.
pub const SETTINGS_CHANNEL: &str = "lifeline_settings";

/// Checks a batch's [`Fence`] inside the transaction that writes it.
pub(super) trait CheckFence {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error>;
}

impl CheckFence for Transaction<'static, Sqlite> {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error> {
        // One process per SQLite file: only `Sole` is ever made for it.
        Ok(*fence == Fence::Sole)
    }
}

impl CheckFence for Transaction<'static, Postgres> {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error> {
        match fence {
            Fence::Sole => Ok(true),
            Fence::Follower => Ok(false),
            Fence::Leader { replica, term } => still_leads(self, replica, *term).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leader acts only within its validity on the monotonic clock; a
    /// process alone on its database always does.
    #[tokio::test(start_paused = true)]
    #[allow(clippy::disallowed_methods)] // the monotonic clock is what is tested
    async fn a_leader_acts_only_within_its_validity() {
        let now = tokio::time::Instant::now();
        let mut l = Leadership::follower("a", Ts(0));
        assert!(!l.acting(now));
        l.leading = true;
        assert!(!l.acting(now), "no validity yet");
        l.valid_until = Some(now + std::time::Duration::from_secs(4));
        assert!(l.acting(now));
        tokio::time::advance(std::time::Duration::from_secs(5)).await;
        assert!(!l.acting(tokio::time::Instant::now()), "woke past it");
        assert!(Leadership::sole("a", Ts(0)).acting(tokio::time::Instant::now()));
    }
}
