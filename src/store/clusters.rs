//! Which cluster the stored rows belong to. Rows written before the store
//! kept a cluster in its keys hold `''`; the first start on such a
//! database gives them to the cluster it is configured with (the first,
//! if several), in one transaction, once.

use super::Db;
use crate::domain::ClusterName;

/// Every table that names the cluster of its rows.
pub const TABLES: [&str; 8] = [
    "resources",
    "tunnels",
    "samples",
    "events",
    "health_transitions",
    "episodes",
    "signals",
    "incidents",
];

/// Gives the rows that name no cluster to `cluster`: how many, or 0 when
/// that was done before (by this replica or another). The marker row is
/// taken first, so two replicas starting at once do it once. A large
/// history takes a while, once: on PostgreSQL this transaction alone
/// lifts the statement timeout.
pub async fn adopt(db: &Db, cluster: &ClusterName) -> Result<u64, sqlx::Error> {
    macro_rules! adopt_on {
        ($pool:expr, $prelude:expr) => {{
            let mut tx = $pool.begin().await?;
            if let Some(sql) = $prelude {
                sqlx::query(sql).execute(&mut *tx).await?;
            }
            let marked = sqlx::query("DELETE FROM unassigned_rows WHERE id = 1")
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if marked == 0 {
                return Ok(0);
            }
            let mut rows = 0;
            for table in TABLES {
                // A name from the list above, never from outside.
                let sql = format!("UPDATE {table} SET cluster = $1 WHERE cluster = ''");
                rows += sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(cluster.as_str())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(rows)
        }};
    }
    match db {
        Db::Sqlite(pool) => adopt_on!(pool, None::<&'static str>),
        Db::Postgres(pg) => adopt_on!(pg.pool, Some("SET LOCAL statement_timeout = 0")),
    }
}
