//! Every resource belongs to a cluster: the store keys what it holds by
//! the cluster first (the same host name in two clusters is two rows, and
//! each cluster loads its own), every item the API lists names its
//! cluster, every list takes `?cluster=`, `/readyz` names each cluster,
//! and a schema change is never applied under replicas of an earlier
//! release that could not write it.

use std::time::Duration;

use lifeline::domain::{ClusterName, HistoryEntry, HistoryEvent, Kind, Labels, ResourceChange};
use lifeline::domain::{Server, Subject, Tunnel};
use lifeline::store::WriteBatch;
use sqlx::Connection;

use crate::support::{self, Cluster};

fn agent(name: &str, addr: &str) -> Server {
    Server {
        kind: Kind::Agent,
        name: name.into(),
        addr: addr.into(),
        version: "18.2.0".into(),
        group_id: String::new(),
        group_generation: 0,
        expires: lifeline::Ts::from_micros(9_000_000_000_000),
        ttl: Duration::from_secs(600),
        labels: Labels::default(),
        auth_server: "auth-1".into(),
    }
}

/// One cluster's batch: the agent `node-1` at `addr`, its tunnel, a
/// heartbeat in its history and an episode (`episode`, its id).
fn batch(addr: &str, episode: i64) -> WriteBatch {
    let mut b = WriteBatch::default();
    b.episodes.push(lifeline::domain::EpisodeChange::Open {
        id: episode,
        agent: "node-1".into(),
        state: lifeline::domain::AgentState::Stranded,
        reasons: "no_live_tunnel".into(),
        cause: None,
        started: lifeline::Ts::from_micros(1_000_000),
        incident: None,
    });
    b.servers.insert(
        (Kind::Agent, "node-1".into()),
        ResourceChange::Put(agent("node-1", addr)),
    );
    b.tunnels.insert(
        "node-1-t".into(),
        Some(Tunnel {
            name: "node-1-t".into(),
            agent: "node-1".into(),
            proxy: "proxy-1".into(),
            last_heartbeat: None,
            expires: None,
        }),
    );
    b.event(
        HistoryEntry {
            at: lifeline::Ts::from_micros(1_000_000),
            kind: Subject::Agent,
            name: "node-1".into(),
            event: HistoryEvent::Heartbeat,
            expires: None,
            ttl_us: None,
            detail: addr.into(),
        },
        100,
    );
    // A count each minute: `episode` agents stranded of ten.
    let stranded = u32::try_from(episode).unwrap();
    for minute in 0..2 {
        b.samples.push(lifeline::domain::Census {
            at: lifeline::Ts::from_micros(60_000_000 * (minute + 1)),
            agents: 10,
            stranded,
            degraded: 0,
        });
    }
    b
}

on_both_engines! {
/// Guards "the same host name in two clusters is two agents" in the
/// store: two clusters' rows under one name live side by side, a
/// whole-kind replacement in one leaves the other's alone, and each
/// cluster loads only its own.
#[tokio::test]
async fn the_same_name_in_two_clusters_is_two_rows_and_each_loads_its_own(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let (east, west) = (ClusterName::new("east"), ClusterName::new("west"));
    let commit = lifeline::store::writer::commit;
    commit(&db, &east, &batch("10.0.0.1:3022", 1)).await.unwrap();
    commit(&db, &west, &batch("10.9.0.1:3022", 2)).await.unwrap();
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM resources").await, 2);
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM tunnels").await, 2);

    let loaded = lifeline::store::read::load(&db, &east).await.unwrap();
    let addrs: Vec<&str> = loaded.servers.iter().map(|s| s.addr.as_str()).collect();
    assert_eq!(addrs, ["10.0.0.1:3022"]);
    assert_eq!(loaded.tunnels.len(), 1);

    // West's agents replaced by none: east's row stays.
    let mut gone = WriteBatch::default();
    gone.replace_servers.push((Kind::Agent, Vec::new()));
    gone.replace_tunnels = Some(Vec::new());
    commit(&db, &west, &gone).await.unwrap();
    assert!(lifeline::store::read::load(&db, &west).await.unwrap().servers.is_empty());
    let east_after = lifeline::store::read::load(&db, &east).await.unwrap();
    assert_eq!(east_after.servers.len(), 1);
    assert_eq!(east_after.tunnels.len(), 1);

    // History names its cluster, and is listed by it.
    let f = |c: &ClusterName| lifeline::store::read::EventFilter {
        cluster: Some(c.clone()),
        limit: 10,
        ..Default::default()
    };
    let west_events = lifeline::store::read::events(&db, &f(&west)).await.unwrap();
    assert_eq!(west_events.len(), 1);
    assert_eq!(west_events[0].cluster, west);
    assert_eq!(west_events[0].detail, "10.9.0.1:3022");

    // So do episodes (each cluster's open ones loaded, and listed by it)
    // and signals.
    assert_eq!(east_after.open_episodes.len(), 1);
    assert_eq!(east_after.open_episodes[0].id, 1);
    let episodes = lifeline::store::read::episodes(
        &db,
        &lifeline::store::read::EpisodeFilter {
            cluster: Some(west.clone()),
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let got: Vec<(i64, &str)> = episodes.iter().map(|e| (e.id, e.cluster.as_str())).collect();
    assert_eq!(got, [(2, "west")]);
    let signal = |id: i64, cluster: &str| {
        let mut r = support::signal_row(id, lifeline::Ts::from_micros(id), lifeline::domain::Outcome::Acked);
        r.cluster = cluster.into();
        r
    };
    lifeline::store::signals::insert(&db, &[signal(1, "east"), signal(2, "west")])
        .await
        .unwrap();
    let signals = lifeline::store::signals::list(
        &db,
        &lifeline::store::signals::SignalFilter {
            cluster: Some(east.clone()),
            limit: 10,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let got: Vec<(i64, &str)> = signals.iter().map(|s| (s.id, s.cluster.as_str())).collect();
    assert_eq!(got, [(1, "east")]);

    // The counts over time: each cluster's own, or every cluster's added
    // up minute by minute.
    let counts = |c: Option<ClusterName>| {
        let db = db.clone();
        async move {
            let (from, to) = (lifeline::Ts::from_micros(0), lifeline::Ts::from_micros(600_000_000));
            let points = lifeline::store::incidents::history(&db, c.as_ref(), from, to, Duration::from_secs(60))
                .await
                .unwrap();
            points.iter().map(|p| (p.agents, p.stranded)).collect::<Vec<_>>()
        }
    };
    assert_eq!(counts(Some(east.clone())).await, [(10, 1), (10, 1)]);
    assert_eq!(counts(Some(west.clone())).await, [(10, 2), (10, 2)]);
    assert_eq!(counts(None).await, [(20, 3), (20, 3)]);
    let oldest = lifeline::store::incidents::oldest_sample(&db, Some(&west)).await.unwrap();
    assert_eq!(oldest, Some(lifeline::Ts::from_micros(60_000_000)));
    let nobody = lifeline::store::incidents::oldest_sample(&db, Some(&"north".into())).await.unwrap();
    assert_eq!(nobody, None);
}
}

/// Guards "every item carries `cluster`" and "every list takes
/// `?cluster=`": the fleet's lists and the history's each name the
/// configured cluster; narrowed to it they are the same; a name no cluster
/// is watched under is a 404 that lists the names that are; `/readyz`
/// reports the cluster by name; the history is the cluster's; the
/// per-state metrics carry its name.
#[tokio::test(start_paused = true)]
async fn every_item_names_its_cluster_and_every_list_narrows_to_one() {
    let c = Cluster::new()
        .agents(4)
        .proxies(2)
        .config(|cfg| cfg.cluster.name = "eu-west".into())
        .start()
        .await;
    c.ready().await;
    c.sim.pause_heartbeats("proxy-1").await;
    let expires = c.expires(Kind::Proxy, "proxy-1").await;
    c.advance_to(expires).await;
    c.flush().await;
    let lists = [
        "/api/v1/agents",
        "/api/v1/proxies",
        "/api/v1/auth-servers",
        "/api/v1/ttl-windows",
        "/api/v1/episodes",
        "/api/v1/events",
        "/api/v1/incidents",
    ];
    for path in lists {
        let all = c.ok(path).await;
        let items = all["items"].as_array().expect("items");
        assert!(!items.is_empty(), "{path}: {all}");
        for i in items {
            assert_eq!(i["cluster"], "eu-west", "{path}: {i}");
        }
        let narrowed = c.ok(&format!("{path}?cluster=eu-west")).await;
        assert_eq!(narrowed["items"], all["items"], "{path}");
        let (status, body) = c.get(&format!("{path}?cluster=us-east")).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "unknown_cluster", "{path}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("\"us-east\"") && message.contains("watched: eu-west"),
            "{path}: {body}"
        );
    }
    // The counts over time are the cluster's.
    let history = "/api/v1/history?series=agents&since=1h";
    c.advance_until(
        "a minute's count is kept",
        Duration::from_secs(180),
        || async {
            c.ok(history).await["points"]
                .as_array()
                .is_some_and(|p| !p.is_empty())
        },
    )
    .await;
    c.flush().await;
    let all = c.ok(history).await;
    assert_eq!(c.ok(&format!("{history}&cluster=eu-west")).await, all);
    let (status, body) = c.get(&format!("{history}&cluster=us-east")).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("unknown_cluster")),
        "{body}"
    );
    // The per-state gauges and the named series count the cluster, by name.
    let text = c.get_text("/metrics").await.1;
    let scrape =
        prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parses");
    let families = [
        "lifeline_agents",
        "lifeline_agents_waiting_for_live_proxy",
        "lifeline_proxies",
        "lifeline_auth_servers",
        "lifeline_watcher_state",
        "lifeline_watcher_generation",
        "lifeline_root_cause_agents",
        "lifeline_auth_server_health",
    ];
    for family in families {
        let samples: Vec<_> = scrape
            .samples
            .iter()
            .filter(|s| s.metric == family)
            .collect();
        // A root cause is a series only while it strands an agent.
        assert!(
            !samples.is_empty() || family == "lifeline_root_cause_agents",
            "{family}: {text}"
        );
        for s in samples {
            assert_eq!(
                s.labels.get("cluster"),
                Some("eu-west"),
                "{family}: {:?}",
                s.labels
            );
        }
    }
    let incident = c.ok("/api/v1/incidents").await["items"][0].clone();
    let one = c.ok(&format!("/api/v1/incidents/{}", incident["id"])).await;
    assert_eq!(one["cluster"], "eu-west", "{one}");
    let (_, ready) = c.get("/readyz").await;
    assert_eq!(ready["clusters"][0]["name"], "eu-west", "{ready}");
    assert_eq!(ready["clusters"][0]["watch"], "ready", "{ready}");
}

/// Guards the rolling upgrade across the schema change that keys rows by
/// cluster: while a replica of the earlier release runs on the database,
/// this release refuses to migrate it (naming the replica and both schema
/// versions) and leaves it as it was; once that replica stops, it
/// migrates; then the earlier release refuses the database by its schema
/// version instead of writing to keys it does not know.
#[tokio::test]
async fn a_schema_change_waits_for_the_earlier_releases_replicas_to_stop() {
    let Some(url) = support::fresh_postgres("rolling_upgrade").await else {
        return;
    };
    let earlier = |mut m: sqlx::migrate::Migrator| {
        m.migrations = std::borrow::Cow::Owned(
            m.migrations
                .iter()
                .filter(|m| m.version < 17)
                .cloned()
                .collect(),
        );
        m
    };
    let all = sqlx::migrate::Migrator::new(support::repo().join("migrations/postgres"))
        .await
        .expect("the migrations read");
    let old = earlier(
        sqlx::migrate::Migrator::new(support::repo().join("migrations/postgres"))
            .await
            .expect("the migrations read"),
    );
    // The earlier release's replica: its schema, its row, its name's lock.
    let mut replica = sqlx::PgConnection::connect(&url).await.expect("connects");
    old.run(&mut replica).await.expect("the earlier schema");
    sqlx::query(
        "INSERT INTO replicas (id, http_addr, grpc_addr, started_us, heartbeat_us) \
         VALUES ('old-1', '', '', 0, 0)",
    )
    .execute(&mut replica)
    .await
    .unwrap();
    let held: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_lock(hashtextextended('lifeline-replica:' || 'old-1', 0))",
    )
    .fetch_one(&mut replica)
    .await
    .unwrap();
    assert!(held);

    let engine = lifeline::store::Engine::Postgres(lifeline::config::DbUrl::new(url.clone()));
    let open = || lifeline::store::open(&engine, lifeline::store::Waits::PRODUCTION);
    let refused = open().await.expect_err("refused while old-1 runs");
    let said = refused.to_string();
    assert!(
        said.contains("schema 16") && said.contains("schema 17") && said.contains("old-1"),
        "{said}"
    );
    let applied: i64 = sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(&mut replica)
        .await
        .unwrap();
    assert_eq!(applied, 16, "nothing applied");

    // old-1 stops: the schema changes.
    replica.close().await.unwrap();
    let db = open().await.expect("migrates once nobody older runs");
    assert_eq!(
        support::sql_i64(&db, "SELECT max(version) FROM _sqlx_migrations").await,
        all.iter().map(|m| m.version).max().unwrap()
    );
    // The earlier release refuses it by its version.
    let mut late = sqlx::PgConnection::connect(&url).await.expect("connects");
    let e = old
        .run(&mut late)
        .await
        .expect_err("the earlier release refuses it");
    assert!(
        matches!(e, sqlx::migrate::MigrateError::VersionMissing(17)),
        "{e}"
    );
}

on_both_engines! {
/// Guards "the restart cap works per cluster": restarts in flight in one
/// cluster do not fill another's cap, and one cluster's run of failed
/// restarts pauses its automatic restarts alone.
#[tokio::test]
async fn one_clusters_restarts_neither_fill_nor_pause_another_cluster(store) {
    use lifeline::domain::Outcome;
    use lifeline::store::signals::{insert_admitting, Admission};
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let restart = |id: i64, cluster: &str, outcome| {
        let mut r = support::signal_row(id, lifeline::Ts::from_micros(id * 1_000), outcome);
        r.cluster = cluster.into();
        r.restart = true;
        r
    };
    let fence = lifeline::store::Fence::Sole;
    let cap = Admission {
        limit: 2,
        pause_after: Some(3),
    };
    // East: three failed restarts, then three more asked for.
    let failed: Vec<_> = (1..=3).map(|id| restart(id, "east", Outcome::Failed)).collect();
    lifeline::store::signals::insert(&db, &failed).await.unwrap();
    let east: Vec<_> = (4..=6).map(|id| restart(id, "east", Outcome::Pending)).collect();
    let left = insert_admitting(&db, &east, &fence, cap).await.unwrap().unwrap();
    assert_eq!(left.paused, [4, 5, 6], "east's failures pause east");

    // West: its own cap of two, unpaused by east's failures.
    let west: Vec<_> = (7..=9).map(|id| restart(id, "west", Outcome::Pending)).collect();
    let left = insert_admitting(&db, &west, &fence, cap).await.unwrap().unwrap();
    assert!(left.paused.is_empty(), "{left:?}");
    assert_eq!(left.at_cap, [9], "west's cap is west's");

    // A manual restart in east, past its pause, fills east's cap alone.
    let manual = Admission {
        limit: 2,
        pause_after: None,
    };
    let east: Vec<_> = (10..=11).map(|id| restart(id, "east", Outcome::Pending)).collect();
    let left = insert_admitting(&db, &east, &fence, manual).await.unwrap().unwrap();
    assert!(left.at_cap.is_empty(), "west's two in flight are not east's: {left:?}");
    let counted = lifeline::store::signals::restarts(&db, &"west".into(), 3).await.unwrap();
    assert_eq!(counted.in_flight, 2);
}
}
