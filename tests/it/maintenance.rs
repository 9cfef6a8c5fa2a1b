//! Maintenance windows: planned and unplanned strandings side by side in
//! one fleet, each window audited, and a window that ends with its agents
//! still down turning them unplanned (acted on, told).

use crate::support;
use std::time::Duration;

use lifeline::store::outbox;
use serde_json::{json, Value};
use support::{Cluster, Running, Store, STRANDED};

/// The other agent [`Running::strand_two`] strands.
const OTHER: &str = "agent-00005";

async fn auto_signals(c: &Running, agent: &str) -> usize {
    c.flush().await;
    let sigs = c
        .ok(&format!("/api/v1/signals?agent={agent}&requested_by=auto"))
        .await;
    sigs["items"].as_array().map_or(0, Vec::len)
}

async fn agent(c: &Running, name: &str) -> Value {
    c.ok(&format!("/api/v1/agents/{name}")).await
}

async fn incidents(c: &Running) -> Vec<Value> {
    c.flush().await;
    c.ok("/api/v1/incidents?limit=100").await["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

on_both_engines! {
/// One window names agent-00001 (and a healthy agent); proxy-1 and
/// proxy-2 stop, stranding agent-00001 and agent-00005. The planned one
/// is shown as planned, in an incident of its own, gets no automatic
/// signal and is told to no one; the unplanned one is reconnected and
/// told (its window names it in another cluster only, so it is not
/// planned here). A manual reconnect of a target still goes and names the
/// window. When the window ends, agent-00001 (still down) turns
/// unplanned: it is reconnected, and its new incident is told.
#[tokio::test(start_paused = true)]
async fn planned_and_unplanned_strandings_side_by_side_then_the_window_ends(store) {
    let c = Cluster::six_legacy().store(store).start().await;
    c.ready().await;
    let until = c.clock.now().saturating_add(Duration::from_secs(90));
    let body = json!({
        // Named in this cluster, in every cluster, and (OTHER) in another
        // cluster only, which plans nothing here.
        "targets": [format!("default/agent/{STRANDED}"), "agent/agent-00003".to_string(), format!("us-east/agent/{OTHER}")],
        "until": until.rfc3339(),
        "reason": "kernel patch",
    });
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(w["status"], "active");
    assert_eq!(w["created_by"], "admin");
    let id = w["id"].as_i64().expect("an id");

    c.strand_two().await;
    c.advance_until("the unplanned agent recovers", Duration::from_secs(40), || async {
        c.state(OTHER).await == "healthy"
    })
    .await;
    // Side by side: one recovered through automatic signals, one left be.
    assert!(auto_signals(&c, OTHER).await > 0, "the unplanned agent is acted on");
    assert_eq!(auto_signals(&c, STRANDED).await, 0, "nothing automatic for a planned stranding");
    let a = agent(&c, STRANDED).await;
    assert_eq!(a["state"], "stranded", "{a}");
    assert_eq!(a["cause"]["planned"], json!({"kind": "maintenance", "window": id}), "{a}");
    let (_, page) = c.get_text(&format!("/agents/{STRANDED}")).await;
    assert!(page.contains(&format!("planned: maintenance window {id}")), "the agent's page says so");
    let summary = c.summary().await;
    assert_eq!(summary["agents"]["planned"], 1, "{summary}");
    let planned_cause = summary["root_causes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["planned"].is_object()).cloned());
    assert!(planned_cause.is_some(), "its own root-cause line: {summary}");

    let list = incidents(&c).await;
    let planned: Vec<&Value> = list.iter().filter(|i| i["planned"].is_object()).collect();
    let unplanned: Vec<&Value> = list.iter().filter(|i| i["planned"].is_null()).collect();
    assert_eq!(planned.len(), 1, "{list:?}");
    assert!(!unplanned.is_empty(), "{list:?}");
    let planned_id = planned[0]["id"].as_i64().expect("id");
    assert!(planned[0]["title"].as_str().unwrap_or("").contains(&format!("maintenance window {id}")));
    assert_eq!(planned[0]["open"], true);
    // Its agent is planned: in no stranded figure, no agent-minutes.
    assert_eq!(
        (&planned[0]["peak_stranded"], &planned[0]["peak_degraded"], &planned[0]["peak_planned"]),
        (&json!(0), &json!(0), &json!(1)),
        "{:?}",
        planned[0]
    );
    assert_eq!(planned[0]["agent_minutes_stranded"], json!(0.0), "{:?}", planned[0]);
    assert_eq!(summary["agents"]["stranded"], 0, "the planned one is not stranded too: {summary}");
    // "Reconnect every stranded agent" names the agents that figure
    // counts: none; the planned one is reconnected by name only.
    let (status, r) = c.post("/api/v1/reconnects", r#"{"state":"stranded"}"#).await;
    assert_eq!((status, &r["matched"]), (202, &json!(0)), "{r}");
    let (_, confirm) = c.get_text("/reconnect-stranded").await;
    assert!(confirm.contains("No agent is stranded right now"), "{confirm}");

    // A manual reconnect of a target goes, and names the window.
    let (status, r) = c.post("/api/v1/agents/agent-00003/reconnect", "").await;
    assert_eq!(status, 202, "{r}");
    assert_eq!(r["maintenance"]["id"], id, "{r}");
    assert_eq!(r["maintenance"]["reason"], "kernel patch");

    // The window ends with agent-00001 still down: unplanned, acted on.
    c.advance_to(until).await;
    c.advance_until("the once-planned agent recovers", Duration::from_secs(40), || async {
        c.state(STRANDED).await == "healthy"
    })
    .await;
    assert!(auto_signals(&c, STRANDED).await > 0, "acted on once unplanned");
    let list = incidents(&c).await;
    let old = list.iter().find(|i| i["id"] == planned_id).expect("still listed");
    assert_eq!(old["open"], false, "the planned incident ended with the window: {old}");
    let (status, w) = c.get(&format!("/api/v1/maintenance/{id}")).await;
    assert_eq!((status, w["status"].as_str()), (200, Some("over")), "{w}");
    assert_eq!(w["audit"][0]["action"], "created");
    assert_eq!(w["audit"][0]["actor"], "admin");

    // Told: the window's start and end, and the unplanned incidents only.
    c.advance_until("the window's end is told", Duration::from_secs(40), || async {
        let events = outbox::after(&c.ll().db, 0, 1000).await.expect("events");
        events.iter().any(|e| e.kind == "maintenance.ended")
    })
    .await;
    c.flush().await;
    let events = outbox::after(&c.ll().db, 0, 1000).await.expect("events");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains(&"maintenance.started"), "{kinds:?}");
    assert!(kinds.contains(&"maintenance.ended"), "{kinds:?}");
    assert!(
        events.iter().all(|e| e.incident_id != Some(planned_id)),
        "the planned incident is never told: {events:?}"
    );
    let after_window = list
        .iter()
        .find(|i| i["planned"].is_null() && i["id"].as_i64() > Some(planned_id))
        .expect("an unplanned incident for the once-planned agent");
    let told = after_window["id"].as_i64();
    assert!(
        events.iter().any(|e| e.incident_id == told && e.kind == "incident.opened"),
        "{events:?}"
    );
    c.shutdown().await;
}
}

/// Every kind of bad request is a clear JSON error that stores nothing;
/// a window can be ended early once, deleted, and each step is audited
/// (who and when), the deletion outliving the window.
#[tokio::test(start_paused = true)]
async fn windows_are_checked_ended_deleted_and_audited() {
    let c = Cluster::six_legacy().store(Store::Sqlite).start().await;
    c.ready().await;
    let until = c.clock.now().saturating_add(Duration::from_secs(3600));
    let bad: Vec<(Value, &str)> = vec![
        (
            json!({"targets": [], "until": until.rfc3339(), "reason": "x"}),
            "targets: at least one",
        ),
        (
            json!({"targets": ["node/a"], "until": until.rfc3339(), "reason": "x"}),
            "unknown target kind",
        ),
        (
            json!({"targets": ["agent/a\u{0}"], "until": until.rfc3339(), "reason": "x"}),
            "control character",
        ),
        (
            json!({"targets": ["agent/a"], "until": "99999-01-01T00:00:00Z", "reason": "x"}),
            "until: not an RFC 3339",
        ),
        (
            json!({"targets": ["agent/a"], "until": until.rfc3339(), "reason": ""}),
            "reason",
        ),
        (
            json!({"targets": ["agent/a"], "until": until.rfc3339(), "reason": "x", "extra": 1}),
            "unknown field",
        ),
    ];
    for (body, says) in bad {
        let (status, e) = c.post("/api/v1/maintenance", &body.to_string()).await;
        assert_eq!(status, 400, "{body} → {e}");
        let msg = e["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{body}: {msg:?} does not say {says:?}");
    }
    // A window that would never be active conflicts with the clock (409),
    // whether its until is at its from or already past.
    for body in [
        json!({"targets": ["agent/a"], "from": until.rfc3339(), "until": until.rfc3339(), "reason": "x"}),
        json!({"targets": ["agent/a"], "until": "2001-01-01T00:00:00Z", "reason": "x"}),
    ] {
        let (status, e) = c.post("/api/v1/maintenance", &body.to_string()).await;
        assert_eq!(
            (status, e["error"]["code"].as_str()),
            (409, Some("never_active")),
            "{body} → {e}"
        );
    }
    let (_, list) = c.get("/api/v1/maintenance").await;
    assert_eq!(list["items"], json!([]), "nothing stored");
    let (status, e) = c
        .call(
            reqwest::Method::POST,
            "/api/v1/maintenance",
            None,
            Some("{}"),
        )
        .await;
    assert_eq!(status, 401, "a mutation needs a token: {e}");

    let body = json!({"targets": ["proxy/proxy-*"], "until": until.rfc3339(), "reason": "rolling upgrade"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    let id = w["id"].as_i64().expect("id");
    let (status, ended) = c.post(&format!("/api/v1/maintenance/{id}/end"), "").await;
    assert_eq!(
        (status, ended["status"].as_str()),
        (200, Some("over")),
        "{ended}"
    );
    assert_eq!(ended["ended_by"], "admin");
    let (status, again) = c.post(&format!("/api/v1/maintenance/{id}/end"), "").await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("already_over")),
        "{again}"
    );
    let (status, gone) = c
        .call(
            reqwest::Method::DELETE,
            &format!("/api/v1/maintenance/{id}"),
            Some(support::ADMIN),
            None,
        )
        .await;
    assert_eq!(status, 200, "{gone}");
    // Kept, as deleted, with its audit.
    let (status, e) = c.get(&format!("/api/v1/maintenance/{id}")).await;
    assert_eq!(
        (status, e["status"].as_str()),
        (200, Some("deleted")),
        "{e}"
    );
    let (status, e) = c.get("/api/v1/maintenance/424242").await;
    assert_eq!(
        (status, e["error"]["code"].as_str()),
        (404, Some("not_found")),
        "{e}"
    );
    for path in [
        "/api/v1/maintenance/abc",
        "/api/v1/maintenance/-1",
        "/api/v1/maintenance/99999999999999999999",
    ] {
        let (status, e) = c.get(path).await;
        assert_eq!(status, 400, "{path}: {e}");
    }
    let audit = lifeline::store::maintenance::audit_of(&c.ll().db, id)
        .await
        .expect("audit");
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| (a.action.as_str(), a.actor.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            ("created", "admin"),
            ("ended", "admin"),
            ("deleted", "admin")
        ]
    );
    c.shutdown().await;
}

/// `lifeline maintenance start|list|end|delete` as an operator types
/// them; a refusal is the API's message and a non-zero exit.
#[tokio::test(start_paused = true)]
async fn the_cli_starts_lists_ends_and_deletes_windows() {
    use support::cli;
    let c = Cluster::six_legacy().store(Store::Sqlite).start().await;
    c.ready().await;
    let (code, out, err) = cli(
        &c,
        &[
            "maintenance",
            "start",
            "--target",
            "proxy/proxy-1",
            "--target",
            "agent/agent-0000?",
            "--for",
            "2h",
            "--reason",
            "kernel upgrade",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("active") && out.contains("proxy/proxy-1 agent/agent-0000?"),
        "{out}"
    );
    assert!(out.contains("kernel upgrade, by updater"), "{out}");
    // `--for 2h` is two hours to the millisecond.
    let w = c.ok("/api/v1/maintenance/1").await;
    let (from, until) = (support::ts(&w["from"]), support::ts(&w["until"]));
    assert_eq!(until.since(from), Duration::from_secs(7200), "{w}");
    let (code, out, _) = cli(&c, &["maintenance", "list"]).await;
    assert_eq!(code, 0);
    assert!(out.trim_start().starts_with("1  active"), "{out}");
    let (code, _, err) = cli(
        &c,
        &[
            "maintenance",
            "start",
            "--target",
            "node/x",
            "--for",
            "1h",
            "--reason",
            "x",
        ],
    )
    .await;
    assert_ne!(code, 0);
    assert!(err.contains("unknown target kind"), "{err}");
    let (code, out, err) = cli(&c, &["maintenance", "end", "1"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("over") && out.contains("ended by updater"),
        "{out}"
    );
    let (_, out, _) = cli(&c, &["maintenance", "list"]).await;
    assert!(
        out.contains("no maintenance windows scheduled or active"),
        "{out}"
    );
    let (_, out, _) = cli(&c, &["maintenance", "list", "--all"]).await;
    assert!(out.contains("over"), "{out}");
    let (code, _, err) = cli(&c, &["maintenance", "end", "1"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("already over"), "{err}");
    let (code, _, err) = cli(&c, &["maintenance", "delete", "1"]).await;
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = cli(&c, &["maintenance", "delete", "1"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("already deleted"), "{err}");
    let (code, _, err) = cli(&c, &["maintenance", "delete", "99"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("not found"), "{err}");
    c.shutdown().await;
}

on_both_engines! {
/// Every accepted window is enforced: with the most windows there may be
/// scheduled, one more is refused with a clear 409, never accepted and
/// left unread.
#[tokio::test(start_paused = true)]
async fn a_window_past_the_bound_is_refused_not_ignored(store) {
    use lifeline::store::maintenance::{create, NewWindow, MAX_IN_FORCE};
    let c = Cluster::six_legacy().store(store).start().await;
    c.ready().await;
    let now = c.clock.now();
    let later = NewWindow {
        targets: vec![lifeline::domain::Target::parse("agent/agent-00003").expect("a target")],
        from: now.saturating_add(Duration::from_secs(86_400)),
        until: now.saturating_add(Duration::from_secs(2 * 86_400)),
        reason: "later".into(),
    };
    for _ in 0..MAX_IN_FORCE {
        let w = create(&c.ll().db, &later, "admin", now).await.expect("stored");
        assert!(w.is_some(), "below the bound");
    }
    let until = now.saturating_add(Duration::from_secs(60));
    let body = json!({"targets": ["agent/agent-00003"], "until": until.rfc3339(), "reason": "now"});
    let (status, v) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "too_many_windows", "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or("").contains("end or delete one first"), "{v}");
    c.shutdown().await;
}
}

on_both_engines! {
/// Deleting an active window keeps it, with its audit: it ends now, by
/// whoever deleted it, reads as `deleted`, and is told as deleted, by
/// them. A second delete is refused.
#[tokio::test(start_paused = true)]
async fn a_deleted_window_is_kept_with_its_audit_and_told_as_deleted(store) {
    let c = Cluster::six_legacy().store(store).start().await;
    c.ready().await;
    let until = c.clock.now().saturating_add(Duration::from_secs(600));
    // An offset and a lowercase z are RFC 3339 too: kept in UTC.
    let local = until.rfc3339().replace('Z', "z");
    let body = json!({"targets": ["agent/agent-00003"], "until": local, "reason": "patch"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(w["until"], until.rfc3339(), "{w}");
    let id = w["id"].as_i64().expect("an id");
    c.advance(Duration::from_secs(31)).await;
    let (status, gone) = c.call(reqwest::Method::DELETE, &format!("/api/v1/maintenance/{id}"), Some(support::ADMIN), None).await;
    assert_eq!(status, 200, "{gone}");
    let kept = c.ok(&format!("/api/v1/maintenance/{id}")).await;
    assert_eq!(kept["status"], "deleted", "{kept}");
    assert_eq!(kept["ended_by"], "admin", "{kept}");
    let actions: Vec<&str> = kept["audit"].as_array().into_iter().flatten().filter_map(|a| a["action"].as_str()).collect();
    assert_eq!(actions, ["created", "deleted"], "{kept}");
    let (status, again) = c.call(reqwest::Method::DELETE, &format!("/api/v1/maintenance/{id}"), Some(support::ADMIN), None).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"]["code"], "already_deleted", "{again}");
    c.advance(Duration::from_secs(31)).await;
    let events = outbox::after(&c.ll().db, 0, 1000).await.expect("events");
    let ended: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "maintenance.ended")
        .filter_map(|e| serde_json::from_str(&e.body).ok())
        .collect();
    assert_eq!(ended.len(), 1, "told once: {ended:?}");
    assert_eq!(ended[0]["window"]["status"], "deleted", "{:?}", ended[0]);
    assert_eq!(ended[0]["window"]["ended_by"], "admin", "{:?}", ended[0]);
    c.shutdown().await;
}
}

/// What an operator may get wrong: a target that names nothing is said
/// (a warning, in the answer and from the CLI), a target over everything
/// needs `all`, and a signed-out visitor is offered no button they cannot
/// use.
#[tokio::test(start_paused = true)]
async fn typos_and_everything_are_said_and_signed_out_visitors_get_no_buttons() {
    use support::cli;
    let c = Cluster::six_legacy().store(Store::Sqlite).start().await;
    c.ready().await;
    let until = c
        .clock
        .now()
        .saturating_add(Duration::from_secs(600))
        .rfc3339();
    let typo = json!({"targets": ["proxy/nosuchproxy", "proxy/proxy-1"], "until": until, "reason": "typo"});
    let (status, w) = c.post("/api/v1/maintenance", &typo.to_string()).await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(
        w["warnings"],
        json!(["target proxy/nosuchproxy names nothing Lifeline knows now"]),
        "{w}"
    );
    // A target may name its cluster; one naming a cluster not watched is
    // said so, once.
    let elsewhere = json!({"targets": ["default/proxy/proxy-1", "us-*/proxy/proxy-1"], "until": until, "reason": "x"});
    let (status, w) = c.post("/api/v1/maintenance", &elsewhere.to_string()).await;
    assert_eq!(status, 201, "{w}");
    assert_eq!(
        w["warnings"],
        json!(["target us-*/proxy/proxy-1 names no cluster Lifeline watches (watched: default)"]),
        "{w}"
    );
    let (status, e) = c
        .post(
            "/api/v1/maintenance",
            &json!({"targets": ["us east/proxy/p"], "until": until, "reason": "x"}).to_string(),
        )
        .await;
    assert_eq!(status, 400, "{e}");
    let every = json!({"targets": ["agent/*"], "until": until, "reason": "all of them"});
    let (status, e) = c.post("/api/v1/maintenance", &every.to_string()).await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("\"all\": true"),
        "{e}"
    );
    let every =
        json!({"targets": ["agent/*"], "until": until, "reason": "all of them", "all": true});
    let (status, w) = c.post("/api/v1/maintenance", &every.to_string()).await;
    assert_eq!(status, 201, "{w}");
    let empty = json!({"targets": [""], "until": until, "reason": "x"});
    let (status, e) = c.post("/api/v1/maintenance", &empty.to_string()).await;
    assert_eq!(status, 400, "{e}");
    let (code, _, err) = cli(
        &c,
        &[
            "maintenance",
            "start",
            "--target",
            "auth_server/auth-9",
            "--for",
            "1h",
            "--reason",
            "typo",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning: target auth_server/auth-9 names nothing"),
        "{err}"
    );
    let (code, _, err) = cli(
        &c,
        &[
            "maintenance",
            "start",
            "--target",
            "proxy/*",
            "--all",
            "--for",
            "1h",
            "--reason",
            "all",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    // Signed out: the windows, but no End now and no form.
    let (status, page) = c.get_text("/maintenance").await;
    assert_eq!(status, 200);
    assert!(page.contains("window-1"), "the windows are shown");
    assert!(
        !page.contains("End now") && !page.contains("action=\"/maintenance\""),
        "{page}"
    );
    assert!(page.contains("to declare or end a window"), "{page}");
    c.shutdown().await;
}
