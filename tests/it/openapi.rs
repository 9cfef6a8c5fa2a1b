//! The REST API's contract: `/api/v1/openapi.json` is OpenAPI 3.1, covers
//! every `/api/v1` route the router serves and nothing it does not, and
//! documents the error shape, the bearer scheme and examples.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::{bounded, Cluster, Running, ADMIN};

/// The operations the API has besides one setting's: (method, path).
const OPERATIONS: &[(&str, &str)] = &[
    ("get", "/api/v1/summary"),
    ("get", "/api/v1/clusters"),
    ("get", "/api/v1/agents"),
    ("get", "/api/v1/agents/{name}"),
    ("post", "/api/v1/agents/{name}/reconnect"),
    ("get", "/api/v1/proxies"),
    ("get", "/api/v1/proxies/{name}"),
    ("get", "/api/v1/auth-servers"),
    ("get", "/api/v1/auth-servers/{name}"),
    ("get", "/api/v1/ttl-windows"),
    ("get", "/api/v1/episodes"),
    ("get", "/api/v1/events"),
    ("get", "/api/v1/incidents"),
    ("get", "/api/v1/incidents/{id}"),
    ("get", "/api/v1/incidents/{id}/report"),
    ("get", "/api/v1/history"),
    ("post", "/api/v1/reconnects"),
    ("get", "/api/v1/signals"),
    ("get", "/api/v1/signals/{id}"),
    ("get", "/api/v1/settings"),
    ("get", "/api/v1/openapi.json"),
    ("get", "/api/v1/webhooks"),
    ("get", "/api/v1/webhooks/{name}/deliveries"),
    ("get", "/api/v1/maintenance"),
    ("post", "/api/v1/maintenance"),
    ("get", "/api/v1/maintenance/{id}"),
    ("delete", "/api/v1/maintenance/{id}"),
    ("post", "/api/v1/maintenance/{id}/end"),
];

/// Served at `/api/v1/settings/{name}`, documented at each setting's own
/// path with that setting's value schema.
const ONE_SETTING: &str = "/api/v1/settings/{name}";

/// Every operation: `OPERATIONS` and get, put, delete of each setting.
fn operations() -> BTreeSet<(String, String)> {
    let mut out: BTreeSet<(String, String)> = OPERATIONS
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    for name in lifeline::settings::Name::ALL {
        for m in ["get", "put", "delete"] {
            out.insert((m.into(), format!("/api/v1/settings/{}", name.as_str())));
        }
    }
    out
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if ["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                out.insert((method.clone(), path.clone()));
            }
        }
    }
    out
}

/// Every `"/api/v1…"` string in the source that follows `marker`.
fn in_source(marker: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let src = crate::support::repo().join("src/http");
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).expect("src/http").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let text = std::fs::read_to_string(&p).expect("source");
            for (i, _) in text.match_indices(marker) {
                let rest = &text[i + marker.len()..];
                if let Some(end) = rest.find('"') {
                    if rest.starts_with("/api/v1") {
                        out.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    out
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => out.push(r.clone()),
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

async fn fetch_document(c: &Running) -> Value {
    let (status, doc) = c.get("/api/v1/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    doc
}

/// Guards the drift between router and document: the document lists
/// exactly the API's operations; every `#[utoipa::path]` in the source is
/// in it; no `/api/v1` route is registered outside the documented router;
/// and every documented operation is served (neither `no_route` nor 405)
/// and answers with the error shape when it refuses.
#[tokio::test(start_paused = true)]
async fn the_router_and_the_document_list_the_same_routes() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let doc = fetch_document(&c).await;
    let want = operations();
    assert_eq!(documented(&doc), want);

    let annotated = in_source("path = \"");
    let paths: BTreeSet<String> = want
        .iter()
        .map(|(_, p)| p.clone())
        .map(|p| match p.starts_with("/api/v1/settings/") {
            true => ONE_SETTING.to_string(),
            false => p,
        })
        .collect();
    assert_eq!(annotated, paths, "#[utoipa::path] paths vs the document");
    let plain = in_source(".route(\"");
    assert!(
        plain.is_empty(),
        "registered outside the documented router: {plain:?}"
    );

    for (method, path) in &want {
        let concrete = path
            .replace("{name}", "no-such-thing")
            .replace("{id}", "999999");
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
        let body = match method.as_str() {
            "put" => Some("{\"value\": 1}"),
            "post" => Some("{}"),
            _ => None,
        };
        let (status, v) = c.call(m, &concrete, Some(ADMIN), body).await;
        assert_ne!(status, 405, "{method} {path} is not served");
        assert_ne!(
            v["error"]["code"], "no_route",
            "{method} {path} is not served"
        );
        if status >= 400 {
            assert!(
                v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                "{method} {concrete} → {status} without the error shape: {v}"
            );
            let documented = &doc["paths"][path][method]["responses"][status.to_string()];
            assert!(
                documented.is_object(),
                "{method} {path} answered {status}, which it does not document"
            );
        }
    }
    c.shutdown().await;
}

/// Guards what the document promises a client generator: OpenAPI 3.1, the
/// bearer scheme on every mutation (optional on reads), the error shape on
/// every 4xx and 5xx, a summary, a tag and an operation id on each, and
/// examples; a wrong method is a 405 with the error shape.
#[tokio::test(start_paused = true)]
async fn the_document_carries_security_errors_and_examples() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let doc = fetch_document(&c).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let mut refs = Vec::new();
    collect_refs(&doc, &mut refs);
    assert!(refs.len() > 50, "{}", refs.len());
    for r in refs {
        let name = r
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a local schema reference: {r}"));
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "{r} does not resolve"
        );
    }
    let error = &doc["components"]["schemas"]["ErrorBody"];
    assert!(error["example"]["error"]["code"].is_string(), "{error}");
    let mut ids = BTreeSet::new();
    for (method, path) in documented(&doc) {
        let op = &doc["paths"][&path][&method];
        let what = format!("{method} {path}");
        assert!(op["summary"].is_string(), "{what}: summary");
        assert!(op["tags"][0].is_string(), "{what}: tag");
        assert!(
            ids.insert(op["operationId"].as_str().expect("id").to_string()),
            "{what}: unique operationId"
        );
        let security = op["security"].as_array().expect("security");
        let anonymous = security
            .iter()
            .any(|s| s.as_object().is_some_and(|o| o.is_empty()));
        assert_eq!(anonymous, method == "get", "{what}: {security:?}");
        for (status, r) in op["responses"].as_object().expect("responses") {
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    r["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{what} {status}"
                );
            }
        }
    }
    let reconnect = &doc["paths"]["/api/v1/agents/{name}/reconnect"]["post"];
    assert_eq!(
        reconnect["responses"]["202"]["links"]["signal"]["operationId"],
        "get_signal"
    );
    for schema in ["ReconnectBody", "Selector"] {
        let s = &doc["components"]["schemas"][schema];
        assert!(
            s["example"].is_object() || s["examples"][0].is_object(),
            "{schema} has an example: {s}"
        );
    }
    for name in lifeline::settings::Name::ALL {
        let path = format!("/api/v1/settings/{}", name.as_str());
        let s = &doc["paths"][&path]["put"]["requestBody"]["content"]["application/json"]["schema"];
        assert!(
            s["example"]["value"] != Value::Null,
            "{path} has an example: {s}"
        );
    }
    assert_eq!(
        doc["components"]["schemas"]["Selector"]["allOf"][1]["oneOf"]
            .as_array()
            .map(Vec::len),
        Some(3),
        "exactly one selector"
    );

    let wrong = bounded(
        "PATCH",
        c.http
            .patch(format!("{}/api/v1/summary", c.ll().base_url()))
            .bearer_auth(ADMIN)
            .send(),
    )
    .await
    .expect("answer");
    assert_eq!(wrong.status().as_u16(), 405);
    let v: Value = wrong.json().await.expect("JSON");
    assert_eq!(v["error"]["code"], "method_not_allowed", "{v}");
    c.shutdown().await;
}

/// The values of `field` in `items`.
fn values<'a>(items: &'a Value, field: &str) -> Vec<&'a str> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i[field].as_str())
        .collect()
}

/// The names a documented enum schema allows.
fn enum_of<'a>(doc: &'a Value, schema: &str) -> Vec<&'a str> {
    doc["components"]["schemas"][schema]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("{schema} is an enum"))
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The schema of query parameter `name` of `GET path`.
fn query_param<'a>(doc: &'a Value, path: &str, name: &str) -> &'a Value {
    doc["paths"][path]["get"]["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .map(|p| &p["schema"])
        .unwrap_or_else(|| panic!("{path} has ?{name}"))
}

/// Guards what fuzzing the contract found, each now fixed:
/// - enums were documented by their Rust names (`Reconnect`), not the
///   wire's (`reconnect`);
/// - a JSON array was read as a body object (`[null, null]` reconnected);
///   a `null` body was refused although documented as "no body";
/// - `{"proxy": …, "state": null}` is one selector, two non-null are not;
/// - cursors, `?since=`, `?state=` of episodes and `?kind=` of TTL windows
///   accepted less (or more) than the document said;
/// - a path parameter's schema was a reference to nothing.
#[tokio::test(start_paused = true)]
async fn what_fuzzing_found_stays_fixed() {
    let c = Cluster::two_stranded_by_hand().await;
    let doc = fetch_document(&c).await;

    let (status, sent) = c
        .call(
            reqwest::Method::POST,
            "/api/v1/agents/agent-00001/reconnect",
            Some(ADMIN),
            Some("null"),
        )
        .await;
    assert_eq!(status, 202, "a null body is no body: {sent}");
    let (_, list) = c.get("/api/v1/signals").await;
    let items = &list["items"];
    assert!(!values(items, "kind").is_empty());
    for (field, schema) in [("kind", "SignalKind"), ("outcome", "Outcome")] {
        let allowed = enum_of(&doc, schema);
        for v in values(items, field) {
            assert!(allowed.contains(&v), "{field} {v:?} not in {allowed:?}");
        }
    }
    let (_, agents) = c.get("/api/v1/agents").await;
    let allowed = enum_of(&doc, "AgentState");
    for v in values(&agents["items"], "state") {
        assert!(allowed.contains(&v), "state {v:?} not in {allowed:?}");
    }

    for (path, body) in [
        ("/api/v1/agents/agent-00005/reconnect", "[null, null]"),
        ("/api/v1/reconnects", "[\"stranded\"]"),
        ("/api/v1/settings/auto_reconnect", "[true]"),
    ] {
        let m = if path.contains("settings") {
            reqwest::Method::PUT
        } else {
            reqwest::Method::POST
        };
        let (status, v) = c.call(m, path, Some(ADMIN), Some(body)).await;
        assert_eq!(status, 400, "{path} {body}: {v}");
        assert_eq!(v["error"]["code"], "bad_body", "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("expected an object")),
            "{v}"
        );
    }

    let (status, v) = c
        .post(
            "/api/v1/reconnects",
            "{\"proxy\": \"no-such-proxy\", \"state\": null}",
        )
        .await;
    assert_eq!(
        (status, &v["error"]["code"]),
        (404, &Value::from("not_found")),
        "{v}"
    );
    let (status, v) = c
        .post(
            "/api/v1/reconnects",
            "{\"proxy\": \"proxy-1\", \"auth_server\": \"auth-1\"}",
        )
        .await;
    assert_eq!(status, 400, "{v}");

    // Cursors: any hex is a position; anything else is refused.
    assert_eq!(c.get("/api/v1/agents?cursor=fffe").await.0, 200);
    assert_eq!(c.get("/api/v1/agents?cursor=").await.0, 400);
    let cursor = query_param(&doc, "/api/v1/agents", "cursor");
    assert!(cursor.to_string().contains("pattern"), "{cursor}");

    // ?since=: RFC 3339 with any offset, or one number and unit.
    for ok in [
        "2026-11-24T08:00:00+01:00",
        "2026-11-24T07:00:00.5Z",
        "15m",
        "2d",
    ] {
        let (status, v) = c
            .get(&format!("/api/v1/events?since={}", ok.replace('+', "%2B")))
            .await;
        assert_eq!(status, 200, "{ok}: {v}");
    }
    for bad in ["1h 30m", "015m", "15", "1234567890s", "soon"] {
        let (status, _) = c
            .get(&format!("/api/v1/events?since={}", bad.replace(' ', "%20")))
            .await;
        assert_eq!(status, 400, "{bad}");
    }
    let since = query_param(&doc, "/api/v1/events", "since");
    assert_eq!(
        since["anyOf"][1]["pattern"],
        lifeline::http::contract::written_pattern(lifeline::http::contract::SINCE_UNITS)
    );
    // `?step=` states what it takes: whole minutes, hours or days. A step
    // in seconds is outside the pattern and refused; one inside is taken.
    let step = query_param(&doc, "/api/v1/history", "step");
    assert_eq!(
        step["pattern"],
        lifeline::http::contract::written_pattern(lifeline::http::contract::STEP_UNITS)
    );
    for (step, want) in [
        ("545371s", 400),
        ("60s", 400),
        ("545371m", 200),
        ("1m", 200),
        ("9d", 200),
    ] {
        let (status, v) = c.get(&format!("/api/v1/history?step={step}")).await;
        assert_eq!(status, want, "{step}: {v}");
    }

    let states = query_param(&doc, "/api/v1/episodes", "state");
    assert_eq!(states["enum"], serde_json::json!(["degraded", "stranded"]));
    let kinds = query_param(&doc, "/api/v1/ttl-windows", "kind");
    assert!(!kinds.to_string().contains("tunnel_connection"), "{kinds}");
    assert_eq!(
        doc["components"]["schemas"]["SettingName"]["enum"][0],
        "grpc_client_lb_policy"
    );
    c.shutdown().await;
}

/// Guards each setting's own value schema: the document states it at the
/// setting's path (the settings room's bounds in the pattern), its
/// example is taken, and another setting's kind of value is refused with
/// `bad_body`, as the schema says it would be.
#[tokio::test(start_paused = true)]
async fn each_setting_documents_and_takes_its_own_value() {
    use lifeline::settings::{Name, Shape};
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let doc = fetch_document(&c).await;
    for name in Name::ALL {
        let path = format!("/api/v1/settings/{}", name.as_str());
        let put = &doc["paths"][&path]["put"];
        let body = &put["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(
            body["properties"]["value"]["allOf"][0],
            lifeline::http::contract::setting_value(name),
            "{path}"
        );
        assert_eq!(body["additionalProperties"], false, "{path}");
        assert_eq!(
            put["operationId"],
            format!("put_setting_{}", name.as_str()),
            "{path}"
        );
        assert!(put.get("parameters").is_none_or(|p| p
            .as_array()
            .is_some_and(|p| p.iter().all(|p| p["in"] == "query"))));
        if let Shape::Duration { max, .. } = name.shape() {
            let pattern = regex_of(&body["properties"]["value"]["allOf"][0]);
            assert!(pattern.contains("(?:"), "{path}: {pattern}");
            let days = max.as_secs() / 86_400;
            assert!(
                !body["properties"]["value"]["description"]
                    .as_str()
                    .unwrap_or_default()
                    .is_empty(),
                "{path} describes its value"
            );
            let (s, v) = c
                .call(
                    reqwest::Method::PUT,
                    &format!("{path}?force=true"),
                    Some(ADMIN),
                    Some(&format!("{{\"value\":\"{}d\"}}", days + 1)),
                )
                .await;
            assert_eq!(
                (s, &v["error"]["code"]),
                (400, &Value::from("bad_body")),
                "{v}"
            );
        }
        let example = body["example"].to_string();
        let (s, v) = c
            .call(
                reqwest::Method::PUT,
                &format!("{path}?force=true"),
                Some(ADMIN),
                Some(&example),
            )
            .await;
        assert_eq!(s, 200, "{path} {example}: {v}");
        let other = match name.shape() {
            Shape::Flag => "\"6h\"",
            _ => "true",
        };
        let (s, v) = c
            .call(
                reqwest::Method::PUT,
                &format!("{path}?force=true"),
                Some(ADMIN),
                Some(&format!("{{\"value\":{other}}}")),
            )
            .await;
        assert_eq!(
            (s, &v["error"]["code"]),
            (400, &Value::from("bad_body")),
            "{path}: {v}"
        );
    }
    c.shutdown().await;
}

/// The `pattern` of a value schema, directly or in its first `anyOf`.
fn regex_of(schema: &Value) -> String {
    schema["pattern"]
        .as_str()
        .or_else(|| schema["anyOf"][0]["pattern"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Guards the one page of every list: each list endpoint documents `limit`
/// (1 to 1000) and a `cursor` of its order (ids newest first, hex names in
/// name order), answers the same error for a bad one, and the parameters
/// are declared once in the source (`http/paged.rs`), not per endpoint.
#[tokio::test(start_paused = true)]
async fn every_list_takes_one_page_declared_once() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let doc = fetch_document(&c).await;
    let lists = [
        ("/api/v1/agents", "^(?:[0-9a-fA-F]{2})+$"),
        ("/api/v1/ttl-windows", "^(?:[0-9a-fA-F]{2})+$"),
        ("/api/v1/episodes", "^[1-9][0-9]{0,17}$"),
        ("/api/v1/events", "^[1-9][0-9]{0,17}$"),
        ("/api/v1/incidents", "^[1-9][0-9]{0,17}$"),
        ("/api/v1/signals", "^[1-9][0-9]{0,17}$"),
    ];
    for (path, pattern) in lists {
        let limit = query_param(&doc, path, "limit");
        assert_eq!(
            (&limit["minimum"], &limit["maximum"]),
            (&1.into(), &1000.into()),
            "{path}"
        );
        assert_eq!(
            query_param(&doc, path, "cursor")["pattern"],
            pattern,
            "{path}"
        );
        for bad in [
            "limit=0",
            "limit=x",
            "limit=1&limit=2",
            "cursor=",
            "cursor=0x",
        ] {
            let (status, body) = c.get(&format!("{path}?{bad}")).await;
            assert_eq!(status, 400, "{path}?{bad}: {body}");
            assert!(body["error"]["message"].is_string(), "{path}?{bad}: {body}");
        }
        let (status, body) = c.get(&format!("{path}?limit=2")).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body["items"].is_array(), "{path}: {body}");
    }
    // One incident's page of episodes and of signals has two cursors of
    // its own (one `limit` in http/incidents.rs); the dashboard's pages
    // take a smaller limit. Nothing else declares one.
    let mut files = Vec::new();
    collect_rs(&crate::support::repo().join("src/http"), &mut files);
    let mut declared = Vec::new();
    for f in files.iter().filter(|f| !f.ends_with("paged.rs")) {
        let text = std::fs::read_to_string(f).expect("source is readable");
        let n = text.matches("\n    limit: Option<u32>,").count();
        let allowed = if f.ends_with("http/incidents.rs") {
            1
        } else if f.components().any(|c| c.as_os_str() == "ui") {
            n
        } else {
            0
        };
        if n != allowed {
            declared.push(format!("{}: {n}", f.display()));
        }
    }
    assert!(
        declared.is_empty(),
        "limit declared outside paged.rs: {declared:?}"
    );
}

fn collect_rs(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    crate::support::files_ending(dir, "rs", out);
}

/// Every error code has one status and one line of meaning in
/// `http::error::CODES` (the book's page is that list, held by `book::`);
/// every code the server's source answers with is in it, and every code
/// in it is answered somewhere.
#[test]
fn every_error_code_is_listed_once_with_its_status_and_answered() {
    use lifeline::http::error::CODES;
    let mut listed = BTreeSet::new();
    for c in CODES {
        assert!(listed.insert(c.code), "{} listed twice", c.code);
        assert!((400..600).contains(&c.status), "{}: {}", c.code, c.status);
    }
    // The book's page is the list (`book::`).
    // The source: `code: "x"` anywhere, and the fixed codes of
    // `ApiError::code`.
    let mut files = Vec::new();
    collect_rs(&crate::support::repo().join("src/http"), &mut files);
    let quoted = |rest: &str| -> Option<String> {
        let rest = rest.strip_prefix('"')?;
        let end = rest.find('"')?;
        let code = &rest[..end];
        (!code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
            .then(|| code.to_string())
    };
    let mut answered = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("source");
        for line in text.lines().filter(|l| !l.contains("ErrorCode {")) {
            if let Some(i) = line.find("code: ") {
                answered.extend(quoted(&line[i + "code: ".len()..]));
            }
        }
        if f.ends_with("error.rs") {
            let from = text.find("pub fn code(&self)").expect("ApiError::code");
            let body = &text[from..from + text[from..].find("\n    }\n").expect("its end")];
            for line in body.lines() {
                if let Some(i) = line.find("=> ") {
                    answered.extend(quoted(&line[i + "=> ".len()..]));
                }
            }
        }
    }
    let unlisted: Vec<_> = answered
        .iter()
        .filter(|c| !listed.contains(c.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "answered but not in CODES: {unlisted:?}"
    );
    let unused: Vec<_> = listed.iter().filter(|c| !answered.contains(**c)).collect();
    assert!(unused.is_empty(), "in CODES but never answered: {unused:?}");
}
