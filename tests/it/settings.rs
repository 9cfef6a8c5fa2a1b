//! Dynamic settings after RFD 0016, over the real API and real restarts on
//! one SQLite file: every origin transition of the RFD's table, every
//! refusal's status and message, the audit, and changes that apply at once.

use crate::support;
use reqwest::Method;
use serde_json::Value;
use support::{cli, Cluster, Running, ADMIN, READER, UPDATER};

const AR: &str = "/api/v1/settings/auto_reconnect";

async fn put(c: &Running, path: &str, token: &str, body: &str) -> (u16, Value) {
    c.call(Method::PUT, path, Some(token), Some(body)).await
}

async fn rm(c: &Running, token: &str) -> (u16, Value) {
    c.call(Method::DELETE, AR, Some(token), None).await
}

async fn origin(c: &Running) -> (String, Value) {
    let v = c.ok(AR).await;
    (
        v["origin"].as_str().unwrap_or_default().to_string(),
        v["value"].clone(),
    )
}

/// What the running Lifeline actually uses (not what the table says).
async fn effective(c: &Running) -> bool {
    c.summary().await["signals"]["auto_reconnect"]
        .as_bool()
        .expect("auto_reconnect in the summary")
}

fn error(v: &Value) -> (String, String) {
    (
        v["error"]["code"].as_str().unwrap_or_default().to_string(),
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Restarts with `signals.auto_reconnect` in the "file" (`Some`) or not.
async fn restart(c: &mut Running, file: Option<bool>) {
    match file {
        Some(v) => {
            c.cfg.signals.auto_reconnect = v;
            c.cfg
                .explicit
                .insert("signals.auto_reconnect".into(), "TOML file".into());
        }
        None => {
            c.cfg.signals.auto_reconnect = true;
            c.cfg.explicit.remove("signals.auto_reconnect");
        }
    }
    c.restart_lifeline().await;
}

on_both_engines! {
/// Guards RFD 0016's table, row by row: defaults → dynamic (create) →
/// dynamic (force) → kept over a restart without the file section →
/// defaults (rm) → config-file (file section, restart; even with the
/// default value) → refused without force, refused with force alone,
/// refused without the create role, dynamic with force+confirm → the file
/// wins again at restart → rm refused → defaults once the section is gone.
#[tokio::test(start_paused = true)]
async fn origin_transitions_follow_rfd_0016(store) {
    let mut c = Cluster::new().store(store).quiet().start().await;
    assert_eq!(origin(&c).await, ("defaults".into(), Value::Bool(true)));

    // defaults → dynamic: a plain create, effective at once.
    let (s, v) = put(&c, AR, UPDATER, r#"{"value": false}"#).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["origin"], "dynamic");
    assert!(!effective(&c).await, "applied without a restart");

    // dynamic: create without force is refused (Choice 5.A).
    let (s, v) = put(&c, AR, UPDATER, r#"{"value": true}"#).await;
    assert_eq!(s, 409, "{v}");
    let (code, msg) = error(&v);
    assert_eq!(code, "already_exists");
    assert!(
        msg.contains("non-default setting auto_reconnect already exists")
            && msg.contains("use -f or --force flag"),
        "{msg}"
    );
    // dynamic → dynamic with force.
    let (s, v) = put(
        &c,
        &format!("{AR}?force=true"),
        UPDATER,
        r#"{"value": false}"#,
    )
    .await;
    assert_eq!((s, v["origin"].as_str()), (200, Some("dynamic")), "{v}");

    // A restart without the file section keeps a dynamic value.
    restart(&mut c, None).await;
    assert_eq!(origin(&c).await, ("dynamic".into(), Value::Bool(false)));
    assert!(!effective(&c).await);

    // dynamic → defaults: rm.
    let (s, v) = rm(&c, UPDATER).await;
    assert_eq!((s, v["origin"].as_str()), (200, Some("defaults")), "{v}");
    assert_eq!(v["value"], true);
    assert!(effective(&c).await);
    // rm of a default is allowed and changes nothing.
    assert_eq!(rm(&c, UPDATER).await.0, 200);

    // defaults → config-file: named in the file, even with the default value.
    restart(&mut c, Some(true)).await;
    assert_eq!(origin(&c).await, ("config-file".into(), Value::Bool(true)));
    let (s, v) = put(&c, AR, UPDATER, r#"{"value": false}"#).await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(error(&v).0, "already_exists");
    let (s, v) = put(
        &c,
        &format!("{AR}?force=true"),
        UPDATER,
        r#"{"value": false}"#,
    )
    .await;
    assert_eq!(s, 409, "{v}");
    let (code, msg) = error(&v);
    assert_eq!(code, "managed_by_config_file");
    assert!(
        msg.contains("This setting (auto_reconnect) is managed by static configuration")
            && msg.contains("signals.auto_reconnect")
            && msg.contains("re-run the command with both --force and --confirm flags"),
        "{msg}"
    );
    let force_confirm = format!("{AR}?force=true&confirm=true");
    let (s, v) = put(&c, &force_confirm, UPDATER, r#"{"value": false}"#).await;
    assert_eq!(s, 403, "update alone cannot overwrite the file: {v}");
    assert!(error(&v).1.contains("needs the create role"), "{v}");
    assert!(effective(&c).await, "nothing changed");

    // config-file → dynamic with force + confirm (and create), until restart.
    let (s, v) = put(&c, &force_confirm, ADMIN, r#"{"value": false}"#).await;
    assert_eq!((s, v["origin"].as_str()), (200, Some("dynamic")), "{v}");
    assert!(!effective(&c).await);
    restart(&mut c, Some(true)).await;
    assert_eq!(
        origin(&c).await,
        ("config-file".into(), Value::Bool(true)),
        "the file wins at start"
    );
    assert!(effective(&c).await);

    // rm of a config-file setting is refused, with the RFD's advice.
    let (s, v) = rm(&c, ADMIN).await;
    assert_eq!(s, 409, "{v}");
    let (code, msg) = error(&v);
    assert_eq!(code, "managed_by_config_file");
    assert!(
        msg.contains("We recommend removing it from the config file (signals.auto_reconnect) and restarting Lifeline in order to reset it to its default"),
        "{msg}"
    );

    // config-file with a changed value, then the section removed: defaults.
    restart(&mut c, Some(false)).await;
    assert_eq!(origin(&c).await, ("config-file".into(), Value::Bool(false)));
    assert!(!effective(&c).await);
    restart(&mut c, None).await;
    assert_eq!(origin(&c).await, ("defaults".into(), Value::Bool(true)));
    assert!(effective(&c).await);

    // dynamic → config-file: the file section and a restart.
    let (s, _) = put(&c, AR, UPDATER, r#"{"value": false}"#).await;
    assert_eq!(s, 200);
    restart(&mut c, Some(true)).await;
    assert_eq!(origin(&c).await, ("config-file".into(), Value::Bool(true)));

    // Every change is audited, newest first, with who and how.
    let hist = c.ok(AR).await["history"].clone();
    let rows: Vec<(String, String, String)> = hist
        .as_array()
        .expect("history")
        .iter()
        .map(|h| {
            (
                h["action"].as_str().unwrap_or_default().into(),
                h["new_origin"].as_str().unwrap_or_default().into(),
                h["actor"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    let expect = [
        ("start", "config-file", "start"),
        ("create", "dynamic", "updater"),
        ("start", "defaults", "start"),
        ("start", "config-file", "start"),
        ("start", "config-file", "start"),
        ("confirm", "dynamic", "admin"),
        ("start", "config-file", "start"),
        ("rm", "defaults", "updater"),
        ("rm", "defaults", "updater"),
        ("force", "dynamic", "updater"),
        ("create", "dynamic", "updater"),
        ("start", "defaults", "start"),
    ];
    let got: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|(a, o, w)| (a.as_str(), o.as_str(), w.as_str()))
        .collect();
    assert_eq!(got, expect, "{hist}");
    c.shutdown().await;
}
}

/// Guards the API's refusals: unknown names, bad values and bodies, the
/// flags, and tokens (none, wrong, too weak); reads open or closed by
/// `access.read_requires_token`.
#[tokio::test(start_paused = true)]
async fn settings_refusals_are_clear() {
    let c = Cluster::new().quiet().start().await;
    let all = c.ok("/api/v1/settings").await;
    let names: Vec<&str> = all["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "grpc_client_lb_policy",
            "full_discovery",
            "auto_reconnect",
            "reconnect_interval",
            "graceful_tunnel_closing",
            "storm_share",
            "retention",
            "audit_retention"
        ]
    );

    let (s, v) = c.get("/api/v1/settings/bogus").await;
    assert_eq!(s, 404);
    let (code, msg) = error(&v);
    assert_eq!(code, "unknown_setting");
    assert!(
        msg.contains("storm_share") && msg.contains("retention"),
        "{msg}"
    );

    for (path, body, needle) in [
        (
            "/api/v1/settings/retention",
            r#"{"value":"10s"}"#,
            "at least 1m",
        ),
        ("/api/v1/settings/storm_share", r#"{"value":2}"#, "(0, 1]"),
        (
            "/api/v1/settings/auto_reconnect",
            r#"{"value":"yes"}"#,
            "true or false",
        ),
        (
            "/api/v1/settings/grpc_client_lb_policy",
            r#"{"value":"{nope"}"#,
            "JSON",
        ),
        (
            "/api/v1/settings/retention",
            r#"{"valeu":"1h"}"#,
            "unknown field",
        ),
        (
            "/api/v1/settings/retention",
            "not json",
            "invalid JSON body",
        ),
        (
            "/api/v1/settings/retention?force=maybe",
            r#"{"value":"1h"}"#,
            "force",
        ),
    ] {
        let (s, v) = put(&c, path, ADMIN, body).await;
        assert_eq!(s, 400, "{path} {body}: {v}");
        assert!(error(&v).1.contains(needle), "{path} {body}: {v}");
    }

    // Tokens: none, wrong, and one without the update role.
    let (s, v) = c
        .call(Method::PUT, AR, None, Some(r#"{"value":false}"#))
        .await;
    assert_eq!(s, 401, "{v}");
    let (code, msg) = error(&v);
    assert_eq!(code, "unauthenticated");
    assert!(
        msg.contains("PUT /api/v1/settings/auto_reconnect needs an API token with the update role")
            && msg.contains("Authorization: Bearer"),
        "{msg}"
    );
    let (s, v) = put(&c, AR, "not-a-token", r#"{"value":false}"#).await;
    assert_eq!((s, error(&v).0.as_str()), (401, "invalid_token"), "{v}");
    let (s, v) = put(&c, AR, READER, r#"{"value":false}"#).await;
    assert_eq!(s, 403, "{v}");
    assert_eq!(
        error(&v).1,
        "token \"reader\" lacks the update role, which PUT /api/v1/settings/auto_reconnect needs (it has: read)"
    );
    let (s, v) = c.call(Method::DELETE, AR, Some(READER), None).await;
    assert_eq!(s, 403, "{v}");
    let (s, v) = c
        .call(
            Method::PUT,
            AR,
            Some("Basic abc"),
            Some(r#"{"value":false}"#),
        )
        .await;
    // reqwest sends "Bearer Basic abc": a token that matches nothing.
    assert_eq!((s, error(&v).0.as_str()), (401, "invalid_token"), "{v}");
    // Another scheme, sent as such, is named for what it is.
    let resp = c
        .http
        .put(format!("{}{AR}", c.ll().base_url()))
        .header("authorization", "Basic abc")
        .header("content-type", "application/json")
        .body(r#"{"value":false}"#)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status().as_u16(), 401);
    assert!(resp.headers().contains_key("www-authenticate"));
    let v: Value = resp.json().await.expect("JSON");
    assert_eq!(error(&v).0, "bad_authorization", "{v}");
    assert!(error(&v).1.contains("Bearer <token>"), "{v}");
    assert_eq!(
        origin(&c).await.0,
        "defaults",
        "no refusal changed anything"
    );

    // A body over server.max_body_bytes: 413 naming the limit.
    let big = format!(r#"{{"value":"{}"}}"#, "x".repeat(70 * 1024));
    let (s, v) = put(&c, "/api/v1/settings/grpc_client_lb_policy", ADMIN, &big).await;
    assert_eq!(s, 413, "{v}");
    assert_eq!(error(&v).0, "body_too_large");
    assert!(error(&v).1.contains("65536 bytes"), "{v}");
    c.shutdown().await;

    // Reads closed by configuration.
    let c = Cluster::new()
        .quiet()
        .config(|cfg| cfg.access.read_requires_token = true)
        .start()
        .await;
    let (s, v) = c.get("/api/v1/settings").await;
    assert_eq!(s, 401, "{v}");
    assert!(error(&v).1.contains("read role"), "{v}");
    let (s, _) = c
        .call(Method::GET, "/api/v1/settings", Some(READER), None)
        .await;
    assert_eq!(s, 200);
    let (s, body) = c.get_text("/metrics").await;
    assert_eq!(s, 401, "/metrics follows the read rule: {body}");
    assert_eq!(c.get("/healthz").await.0, 200, "health stays open");
    c.shutdown().await;
}

on_both_engines! {
/// Guards "effective at once" for the other settings: the summary and
/// `GetServiceConfig` follow a PUT without a restart; values are stored
/// in canonical form.
#[tokio::test(start_paused = true)]
async fn changes_apply_at_once(store) {
    let c = Cluster::new().store(store).quiet().start().await;
    let (s, v) = put(
        &c,
        "/api/v1/settings/reconnect_interval",
        ADMIN,
        r#"{"value":"90m"}"#,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["value"], "90m");
    let sig = &c.summary().await["signals"];
    assert_eq!(sig["reconnect_interval"], "1h 30m");
    for (name, body) in [
        ("full_discovery", r#"{"value":true}"#),
        ("graceful_tunnel_closing", r#"{"value":true}"#),
    ] {
        let (s, v) = put(&c, &format!("/api/v1/settings/{name}"), ADMIN, body).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(c.summary().await["signals"][name], true, "{name}");
    }
    let (s, v) = put(
        &c,
        "/api/v1/settings/storm_share",
        ADMIN,
        r#"{"value":0.25}"#,
    )
    .await;
    assert_eq!((s, v["value"].as_f64()), (200, Some(0.25)), "{v}");
    let (s, v) = put(&c, "/api/v1/settings/retention", ADMIN, r#"{"value":"2h"}"#).await;
    assert_eq!((s, v["value"].as_str()), (200, Some("2h")), "{v}");
    c.shutdown().await;
}
}

/// Guards `lifeline settings get|set|rm`: values typed as an operator
/// would (`false`, `6h`), refusals with the RFD's message and non-zero.
#[tokio::test(start_paused = true)]
async fn the_cli_gets_sets_and_removes_settings() {
    let c = Cluster::new().quiet().start().await;
    let (code, out, err) = cli(&c, &["settings", "set", "auto_reconnect", "false"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"origin\": \"dynamic\""), "{out}");
    let (code, _, err) = cli(&c, &["settings", "set", "auto_reconnect", "true"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("409") && err.contains("--force"), "{err}");
    let (code, out, err) = cli(
        &c,
        &["settings", "set", "auto_reconnect", "true", "--force"],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cli(&c, &["settings", "set", "reconnect_interval", "6h"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"value\": \"6h\""), "{out}");
    let (code, out, err) = cli(&c, &["settings", "get", "auto_reconnect"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"history\""), "{out}");
    let (code, out, err) = cli(&c, &["settings", "rm", "auto_reconnect"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("\"origin\": \"defaults\""), "{out}");
    let (code, out, err) = cli(&c, &["settings", "get"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("storm_share"), "{out}");
    c.shutdown().await;
}

on_both_engines! {
/// Guards read-your-write for settings: a change and a reload of every
/// setting (what a replica does when a notification arrives or its
/// `LISTEN` connection comes back) race many times, and each time the
/// value just changed is the one in effect afterwards, never an older one
/// the reload read before the change committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_never_undoes_a_change_it_raced(store) {
    use lifeline::settings::{PutFlags, Settings};
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let cfg = lifeline::config::Config::default();
    let s = Settings::start(db, &cfg, lifeline::clock::Clock::system())
        .await
        .unwrap();
    let name = Settings::name("auto_reconnect").unwrap();
    let force = PutFlags {
        force: true,
        ..PutFlags::default()
    };
    for i in 0..200 {
        let want = i % 2 == 0;
        let value = Value::Bool(want);
        let (put, ()) = tokio::join!(
            s.put(name, &value, force, "test"),
            s.reload_all()
        );
        put.unwrap();
        assert_eq!(s.live().auto_reconnect(), want, "round {i}");
    }
}
}

/// Shortening a retention erases what is kept at the next prune, the
/// audit of one's own reconnects among it: an `update` token may lengthen
/// `retention` and `audit_retention` but not shorten them, by a PUT or by
/// a reset to a shorter default; a `create` token may, and the setting's
/// audit names who did it.
#[tokio::test(start_paused = true)]
async fn shortening_a_retention_needs_the_create_role() {
    let c = Cluster::new().quiet().start().await;
    let path = "/api/v1/settings/audit_retention";
    let (s, v) = put(&c, path, UPDATER, r#"{"value":"400d"}"#).await;
    assert_eq!(s, 200, "lengthening is an update: {v}");
    let (s, v) = put(&c, path, UPDATER, r#"{"value":"1h"}"#).await;
    assert_eq!(s, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("shortening audit_retention from 400d to 1h")
                && m.contains("create role")),
        "{v}"
    );
    let (s, v) = c.call(Method::DELETE, path, Some(UPDATER), None).await;
    assert_eq!(s, 403, "a reset to the shorter default shortens too: {v}");
    let (s, v) = put(
        &c,
        "/api/v1/settings/retention",
        UPDATER,
        r#"{"value":"1m"}"#,
    )
    .await;
    assert_eq!(s, 403, "{v}");
    let (s, v) = c
        .call(
            Method::PUT,
            &format!("{path}?force=true"),
            Some(ADMIN),
            Some(r#"{"value":"1h"}"#),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (_, one) = c.get(path).await;
    assert_eq!(one["history"][0]["new_value"], "\"1h\"", "{one}");
    let by = one["history"][0]["actor"].as_str().unwrap_or_default();
    assert!(
        by.contains("admin"),
        "the audit names who shortened it: {one}"
    );
    c.shutdown().await;
}
