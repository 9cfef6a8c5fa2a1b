//! Access control at the edges, virtual probes, `Connection: close` while
//! unhealthy, and limits: against real tonic and axum servers on loopback.

use crate::support;
use std::net::SocketAddr;

use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;
use serde_json::Value;
use support::{Cluster, Running, ADMIN, READER, UPDATER};
use tokio::net::TcpListener;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic_health::ServingStatus;

/// A real grpc.health.v1 server; the reporter sets its status.
async fn health_server() -> (SocketAddr, tonic_health::server::HealthReporter) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (reporter, svc) = tonic_health::server::health_reporter();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(TcpListenerStream::new(l)),
    );
    (addr, reporter)
}

/// A port nobody listens on, held for as long as the socket lives: bound
/// but never listening, so a connect is refused, and no server the test
/// starts later can be given the same port (a released port can be).
fn closed_port() -> (tokio::net::TcpSocket, String) {
    let s = tokio::net::TcpSocket::new_v4().expect("socket");
    s.bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("bind");
    let a = s.local_addr().expect("addr").to_string();
    (s, a)
}

async fn probe(c: &Running, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut req = c.http.get(format!("{}{path}", c.ll().base_url()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("probe answers");
    let status = resp.status().as_u16();
    let detail = resp
        .headers()
        .get("x-probe-detail")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, resp.text().await.unwrap_or_default(), detail)
}

/// Guards MADR 047's virtual probes: a gRPC Check against a real health
/// server (SERVING → 200 HEALTHY, NOT_SERVING → 503 UNHEALTHY, the service
/// from the header or the query), TCP connects, a closed port → 503, and
/// targets outside the allow-list or malformed requests refused.
#[tokio::test(start_paused = true)]
async fn virtual_probes_check_real_servers_within_the_allow_list() {
    let (auth, reporter) = health_server().await;
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("auth", ServingStatus::NotServing)
        .await;
    let (_held, closed) = closed_port();
    let (closed2, auth2) = (closed.clone(), auth.to_string());
    let c = Cluster::new()
        .quiet()
        .config(move |cfg| {
            cfg.auth_servers = vec![lifeline::config::StaticAuthServer {
                name: "auth-static".into(),
                addr: auth2,
            }];
            cfg.probes.allow = vec![closed2];
        })
        .start()
        .await;
    c.ready().await;
    let grpc = format!("/probes/grpc/{auth}");
    assert_eq!(
        probe(&c, &grpc, &[]).await,
        (200, "HEALTHY".into(), "SERVING".into())
    );
    let (s, body, detail) = probe(&c, &grpc, &[("x-probe-grpc-service", "auth")]).await;
    assert_eq!(
        (s, body.as_str(), detail.as_str()),
        (503, "UNHEALTHY", "NOT_SERVING")
    );
    let (s, body, _) = probe(&c, &format!("{grpc}?service=auth"), &[]).await;
    assert_eq!((s, body.as_str()), (503, "UNHEALTHY"));
    reporter
        .set_service_status("", ServingStatus::NotServing)
        .await;
    assert_eq!(probe(&c, &grpc, &[]).await.0, 503);
    let (s, body, detail) = probe(&c, &format!("{grpc}?service=nope"), &[]).await;
    assert_eq!((s, body.as_str()), (503, "UNHEALTHY"), "{detail}");

    let (s, body, detail) = probe(&c, &format!("/probes/grpc/{closed}"), &[]).await;
    assert_eq!((s, body.as_str()), (503, "UNHEALTHY"));
    assert!(detail.contains("cannot connect"), "{detail}");
    assert_eq!(
        probe(
            &c,
            &format!("/probes/tcp/{auth}"),
            &[("x-probe-timeout", "2")]
        )
        .await,
        (200, "HEALTHY".into(), "connected".into())
    );
    let (s, body, _) = probe(&c, &format!("/probes/tcp/{closed}"), &[]).await;
    assert_eq!((s, body.as_str()), (503, "UNHEALTHY"));

    // Known proxy addresses are allowed by default; anything else is not.
    let proxy_addr = c.ok("/api/v1/proxies/proxy-1").await["addr"]
        .as_str()
        .expect("proxy addr")
        .to_string();
    let (s, _, _) = probe(&c, &format!("/probes/tcp/{proxy_addr}"), &[]).await;
    assert_ne!(s, 403, "a known proxy is an allowed target");
    for target in ["10.0.0.1:22", "127.0.0.1:9"] {
        let (s, v) = c.get(&format!("/probes/tcp/{target}")).await;
        assert_eq!(s, 403, "{v}");
        assert_eq!(v["error"]["code"], "probe_target_not_allowed");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("probes.allow"));
    }
    let (s, v) = c.get("/probes/grpc/no-port").await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("host:port"));
    for bad in ["0", "soon", "3600"] {
        let (s, _, _) = probe(&c, &grpc, &[("x-probe-timeout", bad)]).await;
        assert_eq!(s, 400, "X-Probe-Timeout {bad}");
    }
    let m = c.get_text("/metrics").await.1;
    assert!(
        m.contains("lifeline_probes_total{kind=\"grpc\",result=\"healthy\"} 1"),
        "{m}"
    );
    assert!(m.contains("lifeline_probes_refused_total 6"), "{m}");
    c.shutdown().await;
}

async fn close_header(c: &Running, path: &str) -> Option<String> {
    let resp = c
        .http
        .get(format!("{}{path}", c.ll().base_url()))
        .send()
        .await
        .expect("answer");
    resp.headers()
        .get("connection")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Guards RFD 0226's HTTP rule: with `http_close_unhealthy`, every answer
/// says `Connection: close` while Lifeline is not ready, and none does
/// once it is; without the option, never.
#[tokio::test(start_paused = true)]
async fn connection_close_only_while_unhealthy_and_only_when_asked() {
    let (_held, unreachable) = closed_port();
    let u2 = unreachable.clone();
    let c = Cluster::new()
        .quiet()
        .config(move |cfg| {
            cfg.server.http_close_unhealthy = true;
            cfg.cluster.addr = format!("http://{u2}");
        })
        .start()
        .await;
    assert!(!c.ll().fleet.is_ready());
    for path in ["/healthz", "/readyz", "/api/v1/summary", "/nope", "/"] {
        assert_eq!(
            close_header(&c, path).await.as_deref(),
            Some("close"),
            "{path} while not ready"
        );
    }
    c.shutdown().await;

    let c = Cluster::new()
        .quiet()
        .config(|cfg| cfg.server.http_close_unhealthy = true)
        .start()
        .await;
    c.ready().await;
    for path in ["/healthz", "/api/v1/summary", "/nope"] {
        assert_eq!(close_header(&c, path).await, None, "{path} once ready");
    }
    c.shutdown().await;

    let c = Cluster::new()
        .quiet()
        .config(move |cfg| cfg.cluster.addr = format!("http://{unreachable}"))
        .start()
        .await;
    assert_eq!(close_header(&c, "/healthz").await, None, "off by default");
    c.shutdown().await;
}

async fn connect(c: &Running, token: Option<&str>, agent: &str) -> Result<(), tonic::Status> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", c.ll().grpc_addr))
        .expect("uri")
        .connect()
        .await
        .expect("gRPC port answers");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(pb::AgentMessage::hello(agent, "test", 2))
        .await
        .expect("queued");
    let stream = ReceiverStream::new(rx);
    let req = match token {
        Some(t) => lifeline_sim::join_request(stream, t),
        None => tonic::Request::new(stream),
    };
    let mut inbound = AgentSignalsClient::new(ch).connect(req).await?.into_inner();
    // The first Discovery arrives once the Hello was accepted.
    inbound.message().await.map(|_| ())
}

/// Guards the join token on `AgentSignals.Connect`, and the gRPC message
/// limit: an oversized agent message is refused with a clear status.
#[tokio::test(start_paused = true)]
async fn agents_need_a_join_token_and_messages_are_bounded() {
    let c = Cluster::new()
        .quiet()
        .signals(|s| s.max_message_bytes = 64 * 1024)
        .start()
        .await;
    c.ready().await;
    let e = connect(&c, None, "agent-00001").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert!(e.message().contains("join token"), "{}", e.message());
    let e = connect(&c, Some("guess"), "agent-00001").await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert!(e.message().contains("not valid"), "{}", e.message());
    connect(&c, Some(lifeline_sim::SIM_JOIN_TOKEN), "agent-00001")
        .await
        .expect("the join token admits the agent");

    let huge = "x".repeat(100 * 1024);
    let e = connect(&c, Some(lifeline_sim::SIM_JOIN_TOKEN), &huge)
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{e:?}"
    );
    assert!(e.message().contains("too large"), "{}", e.message());
    let m = c.get_text("/metrics").await.1;
    assert!(m.contains("lifeline_agent_join_refused_total 2"), "{m}");
    c.shutdown().await;
}

/// Guards the per-IP cap on live streams (429 naming the limit), and the
/// page-size cap.
#[tokio::test(start_paused = true)]
async fn live_streams_per_ip_and_page_sizes_are_capped() {
    let c = Cluster::new()
        .quiet()
        .config(|cfg| cfg.server.max_live_streams_per_ip = 1)
        .start()
        .await;
    c.ready().await;
    let url = format!("{}/live/overview", c.ll().base_url());
    let first = c.http.get(&url).send().await.expect("stream opens");
    assert_eq!(first.status().as_u16(), 200);
    let (s, v) = c.get("/live/overview").await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(v["error"]["code"], "too_many_streams_from_ip");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("server.max_live_streams_per_ip"));
    drop(first);
    c.eventually("the slot comes back when the stream closes", || async {
        let r = c.http.get(&url).send().await.expect("answer");
        r.status().as_u16() == 200
    })
    .await;
    let (s, v) = c.get("/api/v1/agents?limit=1001").await;
    assert_eq!(s, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains("between 1 and 1000"));
    c.shutdown().await;
}

/// A ready cluster and a browser-like client (no redirects followed) at
/// its sign-in page: the client, the base URL, the CSRF cookie and token.
async fn at_the_sign_in_page() -> (Running, reqwest::Client, String, String, String) {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let base = c.ll().base_url();
    let (csrf_cookie, csrf) = support::signin_csrf(&client, &base).await;
    (c, client, base, csrf_cookie, csrf)
}

/// Guards the dashboard's sign-in: a wrong token is a 401 page; the right
/// one sets an HttpOnly, SameSite=Strict session cookie that makes the
/// dashboard's mutations possible and is useless on the API; sign-out
/// clears it.
#[tokio::test(start_paused = true)]
async fn sign_in_gives_a_strict_session_cookie() {
    let (c, client, base, csrf_cookie, csrf) = at_the_sign_in_page().await;
    let csrf = csrf.as_str();
    let anonymous = csrf;
    let post = |token: &str| {
        client
            .post(format!("{base}/signin"))
            .header("cookie", &csrf_cookie)
            .form(&[("csrf", csrf), ("token", token), ("next", "/agents")])
            .send()
    };
    let wrong = post("guess").await.expect("answer");
    assert_eq!(wrong.status().as_u16(), 401);
    assert!(wrong
        .text()
        .await
        .unwrap_or_default()
        .contains("matches no API token"));
    let ok = post(READER).await.expect("answer");
    assert_eq!(ok.status().as_u16(), 303);
    assert_eq!(ok.headers()["location"], "/agents");
    let set = ok.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_string();
    assert!(
        set.starts_with("lifeline_session=")
            && set.contains("HttpOnly")
            && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(
        !set.contains(READER),
        "the token itself is never in the cookie"
    );
    let session = set.split(';').next().expect("pair").to_string();
    let both = format!("{csrf_cookie}; {session}");
    // The token from before sign-in is not one for this session.
    let stale = client
        .post(format!("{base}/signout"))
        .header("cookie", &both)
        .header("accept", "application/json")
        .form(&[("csrf", csrf)])
        .send()
        .await
        .expect("answer");
    assert_eq!(stale.status().as_u16(), 403);
    let v: Value = stale.json().await.expect("JSON");
    assert_eq!(v["error"]["code"], "csrf", "{v}");
    let fresh = support::page_csrf(&client, &base, &both).await;
    let csrf = fresh.as_str();

    // Signed in as "reader": shown, but a reconnect needs update → 403.
    let html = client
        .get(format!("{base}/agents"))
        .header("cookie", &both)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(html.contains("<span>reader</span>"), "signed-in name shown");
    let r = client
        .post(format!("{base}/agents/agent-00001/reconnect"))
        .header("cookie", &both)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 403);
    // The API ignores cookies: no token, no mutation.
    let r = client
        .put(format!("{base}/api/v1/settings/full_discovery"))
        .header("cookie", &both)
        .json(&serde_json::json!({"value": true}))
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 401);
    // An unsigned-in page GET needing no role is fine; an open redirect is
    // not, however the browser would be led to read `//host`.
    for next in [
        "//evil.example",
        "/%09/evil.example",
        "/%5Cevil.example",
        "https://evil.example",
    ] {
        let r = client
            .get(format!("{base}/signin?next={next}"))
            .send()
            .await
            .expect("answer");
        assert!(
            r.text()
                .await
                .unwrap_or_default()
                .contains("name=\"next\" value=\"/\""),
            "{next} was kept"
        );
    }

    let out = client
        .post(format!("{base}/signout"))
        .header("cookie", &both)
        .form(&[("csrf", csrf)])
        .send()
        .await
        .expect("answer");
    assert_eq!(out.status().as_u16(), 303);
    assert!(out.headers()["set-cookie"]
        .to_str()
        .unwrap_or_default()
        .contains("Max-Age=0"));

    // A bearer token with update passes the guard on the same form route:
    // it reaches the hub, which says the agent has no signal stream.
    let r = client
        .post(format!("{base}/agents/agent-00001/reconnect"))
        .header("cookie", &csrf_cookie)
        .header("accept", "application/json")
        .bearer_auth(ADMIN)
        .form(&[("csrf", anonymous)])
        .send()
        .await
        .expect("answer");
    assert_eq!(r.status().as_u16(), 409);
    let v: Value = r.json().await.expect("JSON");
    assert_eq!(v["error"]["code"], "not_connected", "{v}");
    c.shutdown().await;
}

/// Guards sign-in against guessing: ten attempts from one address go
/// through, the next is a 429 with Retry-After (even with the right
/// token), counted; the address earns one more attempt every six seconds.
#[tokio::test(start_paused = true)]
async fn sign_in_attempts_are_limited_per_address() {
    let (c, client, base, csrf_cookie, csrf) = at_the_sign_in_page().await;
    let post = |token: &'static str| {
        client
            .post(format!("{base}/signin"))
            .header("cookie", &csrf_cookie)
            .form(&[("csrf", csrf.as_str()), ("token", token), ("next", "/")])
            .send()
    };
    for i in 0..lifeline::access::SIGN_IN_BURST {
        let r = post("guess").await.expect("answer");
        assert_eq!(r.status().as_u16(), 401, "attempt {i}");
    }
    let held = post(READER).await.expect("answer");
    assert_eq!(held.status().as_u16(), 429);
    assert!(held.headers().contains_key("retry-after"));
    assert!(held
        .text()
        .await
        .unwrap_or_default()
        .contains("Too many sign-in attempts"));
    let m = c.get_text("/metrics").await.1;
    assert!(
        m.contains("lifeline_http_refused_total{reason=\"rate_limited\"} 1"),
        "{m}"
    );
    c.advance(lifeline::access::SIGN_IN_EVERY).await;
    assert_eq!(post(READER).await.expect("answer").status().as_u16(), 303);
    c.shutdown().await;
}

/// Guards the Settings page: anyone who may read sees every setting with
/// its value, origin and default; signed in with `update`, a change made
/// through the page's form (CSRF checked, the API's rules) is what the API
/// then reports, with its author in the history; a reset goes back; a
/// form without its CSRF token, or from a `read` token, changes nothing.
#[tokio::test(start_paused = true)]
async fn the_settings_page_changes_a_setting_as_the_api_would() {
    let (c, client, base, csrf_cookie, csrf) = at_the_sign_in_page().await;
    let page = |cookies: String| {
        let client = client.clone();
        let base = base.clone();
        async move {
            client
                .get(format!("{base}/settings"))
                .header("cookie", cookies)
                .send()
                .await
                .expect("page")
                .text()
                .await
                .expect("html")
        }
    };
    let html = page(csrf_cookie.clone()).await;
    assert!(
        html.contains("<code>storm_share</code>") && html.contains("Default"),
        "{html}"
    );
    assert!(
        !html.contains("action=\"/settings/storm_share\""),
        "no form before sign-in"
    );
    let sign_in = |token: &'static str| {
        let client = client.clone();
        let (base, csrf_cookie, csrf) = (base.clone(), csrf_cookie.clone(), csrf.clone());
        async move {
            let ok = client
                .post(format!("{base}/signin"))
                .header("cookie", &csrf_cookie)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("token", token),
                    ("next", "/settings"),
                ])
                .send()
                .await
                .expect("answer");
            assert_eq!(ok.status().as_u16(), 303);
            let session = support::cookie_pair(&ok);
            format!("{csrf_cookie}; {session}")
        }
    };
    let both = sign_in(UPDATER).await;
    let fresh = support::page_csrf(&client, &base, &both).await;
    let post = |path: &str, form: Vec<(&'static str, String)>, cookies: &str| {
        client
            .post(format!("{base}{path}"))
            .header("cookie", cookies)
            .form(&form)
            .send()
    };
    // Without its token: refused, nothing changed.
    let r = post(
        "/settings/storm_share",
        vec![("csrf", "nope".into()), ("value", "0.4".into())],
        &both,
    )
    .await
    .expect("answer");
    assert_eq!(r.status().as_u16(), 403);
    let r = post(
        "/settings/storm_share",
        vec![("csrf", fresh.clone()), ("value", "0.4".into())],
        &both,
    )
    .await
    .expect("answer");
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        r.headers()["location"],
        "/settings?saved=storm_share#setting-storm_share"
    );
    let (_, v) = c.get("/api/v1/settings/storm_share").await;
    assert_eq!(v["value"], 0.4, "{v}");
    assert_eq!(v["origin"], "dynamic", "{v}");
    assert!(
        v["history"][0]["actor"]
            .as_str()
            .is_some_and(|a| !a.is_empty()),
        "{v}"
    );
    let saved = client
        .get(format!("{base}/settings?saved=storm_share"))
        .header("cookie", &both)
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("html");
    assert!(
        saved.contains("storm_share saved.") && saved.contains("<code class=\"value\">0.4</code>"),
        "{saved}"
    );
    // A value the rules refuse is a clear 400 page, and changes nothing.
    let r = post(
        "/settings/storm_share",
        vec![("csrf", fresh.clone()), ("value", "7".into())],
        &both,
    )
    .await
    .expect("answer");
    assert_eq!(r.status().as_u16(), 400);
    let (_, v) = c.get("/api/v1/settings/storm_share").await;
    assert_eq!(v["value"], 0.4, "{v}");
    let r = post(
        "/settings/storm_share/reset",
        vec![("csrf", fresh.clone())],
        &both,
    )
    .await
    .expect("answer");
    assert_eq!(r.status().as_u16(), 303);
    let (_, v) = c.get("/api/v1/settings/storm_share").await;
    assert_ne!(v["origin"], "dynamic", "{v}");
    // A read-only session sees the page and cannot change anything.
    let reader = sign_in(READER).await;
    let reader_csrf = support::page_csrf(&client, &base, &reader).await;
    let r = post(
        "/settings/storm_share",
        vec![("csrf", reader_csrf), ("value", "0.3".into())],
        &reader,
    )
    .await
    .expect("answer");
    assert_eq!(r.status().as_u16(), 403);
    c.shutdown().await;
}
