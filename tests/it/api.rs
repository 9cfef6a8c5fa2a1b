//! The REST API's contract: shapes, filters, pagination, and a JSON error
//! with the right status for every bad parameter.

use crate::support;
use support::{names, strs, Cluster};

/// Guards the error contract: each bad parameter is a 400 whose JSON body
/// names what is wrong; unknown names are 404s.
#[tokio::test(start_paused = true)]
async fn bad_parameters_get_json_errors() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let cases = [
        ("/api/v1/agents?limit=abc", 400, "limit"),
        ("/api/v1/events?event=exploded", 400, "event"),
        ("/api/v1/agents?limit=0", 400, "limit"),
        ("/api/v1/agents?limit=5000", 400, "limit"),
        ("/api/v1/agents?state=lost", 400, "unknown variant"),
        ("/api/v1/agents?stat=stranded", 400, "unknown field"),
        ("/api/v1/agents?proxy=", 400, "proxy"),
        ("/api/v1/episodes?cursor=abc", 400, "cursor"),
        // Cursors that do not decode are errors on every paged endpoint,
        // never an empty page.
        ("/api/v1/agents?cursor=%ff%fe", 400, "cursor"),
        (
            "/api/v1/agents?cursor=agent-00001",
            400,
            "not a valid cursor",
        ),
        ("/api/v1/agents?cursor=", 400, "cursor"),
        ("/api/v1/ttl-windows?cursor=%ff%fe", 400, "cursor"),
        ("/api/v1/ttl-windows?kind=agent&cursor=zz", 400, "cursor"),
        ("/api/v1/episodes?cursor=%ff%fe", 400, "cursor"),
        ("/api/v1/signals?cursor=%ff%fe", 400, "cursor"),
        ("/api/v1/episodes?state=healthy", 400, "state"),
        ("/api/v1/episodes?open=maybe", 400, "open"),
        ("/api/v1/events?since=yesterday", 400, "since"),
        ("/api/v1/events?kind=node", 400, "kind"),
        ("/api/v1/ttl-windows?kind=tunnel_connection", 400, "kind"),
        ("/api/v1/ttl-windows?kind=node", 400, "kind"),
        ("/api/v1/agents/agent-99999", 404, "agent-99999"),
        ("/api/v1/proxies/proxy-9", 404, "proxy-9"),
        ("/api/v1/auth-servers/auth-9", 404, "auth-9"),
        ("/api/v1/nope", 404, "/api/v1/nope"),
    ];
    for (path, status, needle) in cases {
        let (got, body) = c.get(path).await;
        assert_eq!(got, status, "{path}: {body}");
        let code = body["error"]["code"].as_str().unwrap_or_default();
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(!code.is_empty(), "{path}: no error code in {body}");
        assert!(
            msg.contains(needle),
            "{path}: {msg:?} should mention {needle:?}"
        );
    }
    c.shutdown().await;
}

/// Guards pagination: following `next_cursor` visits every agent once.
#[tokio::test(start_paused = true)]
async fn agents_paginate_with_a_cursor_and_filter() {
    let c = Cluster::new().agents(25).quiet().start().await;
    c.ready().await;
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cur) => format!("/api/v1/agents?limit=7&cursor={cur}"),
            None => "/api/v1/agents?limit=7".to_string(),
        };
        let page = c.ok(&path).await;
        all.extend(names(&page["items"]));
        match page["next_cursor"].as_str() {
            Some(n) => cursor = Some(n.to_string()),
            None => break,
        }
    }
    assert_eq!(all.len(), 25);
    let mut dedup = all.clone();
    dedup.dedup();
    assert_eq!(dedup, all);

    let on_auth = c.ok("/api/v1/agents?auth_server=auth-2&limit=100").await;
    assert_eq!(on_auth["items"].as_array().unwrap().len(), 12);
    let on_proxy = c.ok("/api/v1/agents?proxy=proxy-1&limit=100").await;
    for a in on_proxy["items"].as_array().unwrap() {
        assert!(a["tunnels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["proxy"] == "proxy-1"));
    }
    let q = c.ok("/api/v1/agents?q=0002").await;
    assert_eq!(
        names(&q["items"]),
        vec![
            "agent-00002",
            "agent-00020",
            "agent-00021",
            "agent-00022",
            "agent-00023",
            "agent-00024",
            "agent-00025"
        ]
    );

    let item = &c.ok("/api/v1/agents?limit=1").await["items"][0];
    for field in [
        "name",
        "state",
        "reasons",
        "since",
        "auth_server",
        "tunnels",
        "last_heartbeat_at",
        "expires_at",
        "ttl_ms",
    ] {
        assert!(!item[field].is_null(), "agent item lacks {field}: {item}");
    }
    assert_eq!(item["ttl_ms"], 10_000);
    c.shutdown().await;
}

/// Guards the TTL window: last heartbeat, TTL, expiry, time remaining and
/// missed heartbeats, for proxies and auth servers by default.
#[tokio::test(start_paused = true)]
async fn ttl_windows_count_missed_heartbeats() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let all = c.ok("/api/v1/ttl-windows").await;
    let kinds = strs(&all["items"], "kind");
    assert_eq!(kinds.iter().filter(|k| **k == "proxy").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "auth_server").count(), 2);

    // Quiet cluster: nobody heartbeats; 7 s is past the 6 s max interval.
    c.advance(std::time::Duration::from_secs(7)).await;
    let w = c.ok("/api/v1/ttl-windows?kind=proxy&limit=1").await;
    let p = &w["items"][0];
    assert_eq!(p["ttl_ms"], 10_000);
    assert_eq!(p["heartbeat_interval_ms"], serde_json::json!([5000, 6000]));
    assert_eq!(p["heartbeats_missed"], 1, "{p}");
    let remaining = p["remaining_ms"].as_i64().unwrap();
    assert!((2_900..=3_000).contains(&remaining), "{p}");
    // Cursors are opaque; this one leads to the next proxy.
    let next = w["next_cursor"].as_str().expect("a next page").to_string();
    let w2 = c
        .ok(&format!(
            "/api/v1/ttl-windows?kind=proxy&limit=1&cursor={next}"
        ))
        .await;
    assert_eq!(w2["items"][0]["name"], "proxy-2", "{w2}");
    c.shutdown().await;
}

/// Guards TTL-window paging (regression: proxies were walked in hash order,
/// and the mixed default listing shared one name cursor across kinds, so a
/// cursor past "proxy-3" skipped every auth server).
#[tokio::test(start_paused = true)]
async fn ttl_windows_page_through_every_resource_once_in_order() {
    let c = Cluster::new().proxies(4).quiet().start().await;
    c.ready().await;
    let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let agents = names(&c.ok("/api/v1/agents").await["items"]);
    assert_eq!(agents.len(), 6);
    for (query, want) in [
        (
            "",
            owned(&[
                "auth-1", "auth-2", "proxy-1", "proxy-2", "proxy-3", "proxy-4",
            ]),
        ),
        (
            "kind=proxy&",
            owned(&["proxy-1", "proxy-2", "proxy-3", "proxy-4"]),
        ),
        ("kind=agent&", agents),
    ] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(cur) => format!("/api/v1/ttl-windows?{query}limit=2&cursor={cur}"),
                None => format!("/api/v1/ttl-windows?{query}limit=2"),
            };
            let page = c.ok(&path).await;
            seen.extend(strs(&page["items"], "name"));
            match page["next_cursor"].as_str() {
                Some(n) => cursor = Some(n.to_string()),
                None => break,
            }
        }
        assert_eq!(seen, want, "query {query:?}");
    }
    c.shutdown().await;
}

/// Every connection of `pool`, held while the result lives.
async fn hold_all<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
) -> Vec<sqlx::pool::PoolConnection<DB>> {
    let mut held = Vec::new();
    while held.len() < pool.options().get_max_connections() as usize {
        held.push(pool.acquire().await.expect("a connection"));
    }
    held
}

on_both_engines! {
/// Guards "reads never hang": with every database connection taken (a
/// writer stuck behind a lock, say), a request that needs one is answered
/// 503 `busy` once the 2 s acquire timeout passes, and works again after.
#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_get_a_database_connection_is_a_clear_503(store) {
    let c = Cluster::new()
        .store(store)
        .quiet()
        .production_waits()
        .start()
        .await;
    c.ready().await;
    c.flush().await;
    let held = match &c.ll().db {
        lifeline::store::Db::Sqlite(p) => (hold_all(p).await, Vec::new()),
        lifeline::store::Db::Postgres(p) => (Vec::new(), hold_all(p).await),
    };
    let http = c.http.clone();
    let url = format!("{}/api/v1/episodes", c.ll().base_url());
    let req = tokio::spawn(async move {
        let r = http.get(url).send().await.expect("an answer");
        let status = r.status().as_u16();
        (
            status,
            r.json::<serde_json::Value>().await.unwrap_or_default(),
        )
    });
    // Virtual time moves the pool's acquire timeout.
    for _ in 0..12 {
        if req.is_finished() {
            break;
        }
        c.advance(std::time::Duration::from_millis(250)).await;
    }
    let (status, body) = support::real_timeout(std::time::Duration::from_secs(10), req)
        .await
        .expect("answered in time")
        .expect("request task");
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "busy", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("2s")),
        "{body}"
    );
    drop(held);
    assert_eq!(c.get("/api/v1/episodes").await.0, 200);
    c.shutdown().await;
}
}

/// `/api/v1/clusters` has a row for the cluster Lifeline watches, under
/// its configured name, with the summary's figures, its open incidents
/// and its newest event; the one-cluster form is named `default`.
#[tokio::test(start_paused = true)]
async fn the_clusters_list_gives_each_clusters_watch_counts_and_incidents() {
    let c = Cluster::new().start().await;
    c.ready().await;
    let v = c.ok("/api/v1/clusters").await;
    let rows = v["items"].as_array().expect("items");
    assert_eq!(rows.len(), 1, "{v}");
    let row = &rows[0];
    assert_eq!(row["name"], "default", "{v}");
    assert_eq!(row["source"], "lifeline", "{v}");
    assert_eq!(row["watch"], "ready", "{v}");
    let summary = c.ok("/api/v1/summary").await;
    assert_eq!(row["agents"], summary["agents"], "{v}");
    assert_eq!(row["proxies"], summary["proxies"], "{v}");
    assert_eq!(row["auth_servers"], summary["auth_servers"], "{v}");
    assert_eq!(row["open_incidents"], 0, "{v}");
    assert!(row["last_event_at"].is_string(), "{v}");
    c.shutdown().await;

    let c = Cluster::new()
        .config(|cfg| cfg.cluster.name = "eu-west".into())
        .start()
        .await;
    c.ready().await;
    c.strand_two().await;
    c.flush().await;
    let v = c.ok("/api/v1/clusters").await;
    let row = &v["items"][0];
    assert_eq!(row["name"], "eu-west", "{v}");
    let open = c.ok("/api/v1/incidents?open=true").await;
    let n = open["items"].as_array().map(Vec::len).unwrap_or(0);
    assert!(n >= 1, "{open}");
    assert_eq!(row["open_incidents"], n, "{v}");
    assert!(row["agents"]["stranded"].as_u64() > Some(0), "{v}");
    c.shutdown().await;
}
