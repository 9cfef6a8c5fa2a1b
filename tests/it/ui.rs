//! The dashboard over real HTTP: every page renders, names from the network
//! are escaped everywhere, forms are CSRF-protected and work without JS,
//! the live stream sends the overview, bad input gets an error page.
//! (The real-browser test is `tests/it/browser.rs`.)

use crate::support;
use std::time::Duration;

use lifeline::domain::Kind;
use lifeline::proto::to_timestamp;
use lifeline::proto::v1 as pb;
use lifeline_sim::cluster::server;
use support::{Cluster, Running, STRANDED as AGENT};
use tonic_health::ServingStatus;

const SCRIPT: &str = "<script>alert(1)</script>";
const IMG: &str = "<img src=x onerror=alert(1)>";

/// `<` in any of askama's escaped forms.
fn escaped(html: &str, raw: &str) -> bool {
    let a = raw.replace('<', "&#60;").replace('>', "&#62;");
    let b = raw.replace('<', "&lt;").replace('>', "&gt;");
    html.contains(&a) || html.contains(&b) || html.contains(&a.replace("&#62;", "&gt;"))
}

fn assert_safe(what: &str, html: &str) {
    for raw in [SCRIPT, IMG] {
        assert!(!html.contains(raw), "{what}: unescaped {raw:?}");
    }
}

async fn page(c: &Running, path: &str) -> String {
    let (status, html) = c.get_text(path).await;
    assert_eq!(status, 200, "GET {path} → {status}: {html}");
    html
}

/// [`Cluster::six_legacy`] with automatic reconnects off: only the
/// dashboard moves agents.
fn fleet() -> Cluster {
    Cluster::six_legacy().signals(|s| s.auto_reconnect = false)
}

/// The browser's CSRF cookie and the page's form token.
async fn form_token(c: &Running, path: &str) -> (String, String) {
    let url = format!("{}{}", c.ll().base_url(), path);
    let resp = c.http.get(&url).send().await.expect("GET");
    // A first visit sets the CSRF cookie.
    let cookie = support::cookie_pair(&resp);
    assert!(
        resp.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("HttpOnly; SameSite=Strict"),
        "cookie flags"
    );
    let mut html = resp.text().await.expect("body");
    if !html.contains("name=\"csrf\" value=\"") {
        // Signed out, the page offers no form: the sign-in page's token
        // is the same (it is the cookie's).
        let signin = format!("{}/signin", c.ll().base_url());
        let resp = c
            .http
            .get(&signin)
            .header("cookie", &cookie)
            .send()
            .await
            .expect("GET");
        html = resp.text().await.expect("body");
    }
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("the page (or the sign-in page) has a form with a CSRF token");
    let rest = &html[at + "name=\"csrf\" value=\"".len()..];
    let token = rest[..rest.find('"').expect("token end")].to_string();
    (cookie, token)
}

/// How a form is sent: as a browser without the cookie, with it, and
/// whether its JS asks for JSON.
struct Form<'a> {
    cookie: Option<&'a str>,
    json: bool,
    extra: Vec<(&'a str, &'a str)>,
    /// Bearer token; [`support::ADMIN`] unless `anonymous()`.
    token: Option<&'a str>,
}

impl Default for Form<'_> {
    fn default() -> Self {
        Form {
            cookie: None,
            json: false,
            extra: Vec::new(),
            token: Some(support::ADMIN),
        }
    }
}

impl<'a> Form<'a> {
    fn cookie(c: &'a str) -> Self {
        Form {
            cookie: Some(c),
            ..Form::default()
        }
    }
    fn anonymous(mut self) -> Self {
        self.token = None;
        self
    }
    fn json(mut self) -> Self {
        self.json = true;
        self
    }
    fn header(mut self, k: &'a str, v: &'a str) -> Self {
        self.extra.push((k, v));
        self
    }
}

async fn post_form(
    c: &Running,
    path: &str,
    fields: &[(&str, &str)],
    f: Form<'_>,
) -> (u16, reqwest::header::HeaderMap, String) {
    let url = format!("{}{}", c.ll().base_url(), path);
    let body: String = fields
        .iter()
        .map(|(k, v)| {
            format!(
                "{k}={}",
                url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>()
            )
        })
        .collect::<Vec<_>>()
        .join("&");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut req = client
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    if let Some(t) = f.token {
        req = req.bearer_auth(t);
    }
    if let Some(ck) = f.cookie {
        req = req.header("cookie", ck);
    }
    if f.json {
        req = req.header("accept", "application/json");
    }
    for (k, v) in f.extra {
        req = req.header(k, v);
    }
    let resp = req.send().await.expect("POST");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.text().await.unwrap_or_default())
}

/// Guards escaping everywhere a name from the network is shown: an agent
/// named `<script>alert(1)</script>` on a proxy named `<img …>` that
/// expires, so both appear in counts, root causes, tables, the TTL SVG,
/// tooltips, hrefs, the agent's own page and the live stream.
#[tokio::test(start_paused = true)]
async fn names_from_the_network_are_escaped_on_every_page() {
    let c = Cluster::new()
        .quiet()
        .ttl(Duration::from_secs(3600))
        .agent_ttl(Duration::from_secs(3600))
        .start()
        .await;
    c.ready().await;
    let now = c.clock.now();
    c.sim
        .put_server(server(
            Kind::Proxy,
            IMG,
            "127.0.0.1:1",
            "",
            Duration::from_secs(5),
            now,
        ))
        .await;
    c.sim
        .put_server(server(
            Kind::Agent,
            SCRIPT,
            "127.0.0.1:2",
            "auth-1",
            Duration::from_secs(3600),
            now,
        ))
        .await;
    c.sim
        .put_tunnel(pb::TunnelConnection {
            name: format!("{SCRIPT}.{IMG}"),
            agent: SCRIPT.into(),
            proxy: IMG.into(),
            last_heartbeat: Some(to_timestamp(now)),
            expires: None,
        })
        .await;
    c.advance(Duration::from_secs(6)).await;
    c.quiesce().await;
    assert!(c.agents_in("stranded").await.contains(&SCRIPT.to_string()));

    let enc = "%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
    for path in [
        "/".to_string(),
        "/agents".into(),
        "/agents?state=stranded".into(),
        format!("/agents/{enc}"),
        "/ttl".into(),
        "/ttl?kind=agent".into(),
        "/ttl?kind=proxy".into(),
        "/auth".into(),
        "/signals".into(),
        "/reconnect-stranded".into(),
    ] {
        let html = page(&c, &path).await;
        assert_safe(&path, &html);
    }
    let home = page(&c, "/").await;
    assert!(escaped(&home, SCRIPT), "the agent is listed, escaped");
    assert!(escaped(&home, IMG), "the proxy is named, escaped");
    assert!(
        home.contains(&format!("href=\"/agents/{enc}\"")),
        "href is percent-encoded"
    );
    assert!(home.contains("1 agent stranded:"), "root cause line");
    let agent = page(&c, &format!("/agents/{enc}")).await;
    assert!(escaped(&agent, SCRIPT));
    // An error page repeats the name it could not find: escaped too.
    let (status, html) = c.get_text(&format!("/agents/{enc}-gone")).await;
    assert_eq!(status, 404);
    assert_safe("404 page", &html);
    assert!(
        escaped(&html, SCRIPT),
        "the 404 names the agent, escaped: {html}"
    );
    // The live fragment.
    let frag = first_live_event(&c).await;
    assert_safe("live fragment", &frag);
    assert!(escaped(&frag, SCRIPT));

    // And the browser would not run an inline script anyway.
    let resp = c
        .http
        .get(format!("{}/", c.ll().base_url()))
        .send()
        .await
        .expect("GET /");
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    c.shutdown().await;
}

async fn first_live_event(c: &Running) -> String {
    first_live_event_as(c, None).await
}

/// The live overview's first event, for a browser sending `cookie`.
async fn first_live_event_as(c: &Running, cookie: Option<&str>) -> String {
    let mut req = c.http.get(format!("{}/live/overview", c.ll().base_url()));
    if let Some(cookie) = cookie {
        req = req.header("cookie", cookie);
    }
    let resp = req.send().await.expect("live stream");
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = resp;
    let mut text = String::new();
    while !text.contains("\n\n") {
        let chunk = next_chunk(&mut body).await.expect("an event within 10 s");
        text.push_str(&chunk);
    }
    assert!(text.starts_with("event: overview\n"), "{text}");
    text
}

/// A signed-out visitor is shown no action they cannot take: no
/// "reconnect all" on the overview or in its live stream, no Reconnect
/// button in the agent list. Signed in, they are there.
#[tokio::test(start_paused = true)]
async fn signed_out_visitors_are_offered_no_reconnect() {
    let c = Cluster::two_stranded_by_hand().await;
    let base = c.ll().base_url();
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let cookie = support::signed_in(&no_redirects, &base, support::ADMIN).await;
    let as_browser = |path: &'static str, cookie: Option<String>| {
        let (c, base) = (&c, base.clone());
        async move {
            let mut req = c.http.get(format!("{base}{path}"));
            if let Some(cookie) = cookie {
                req = req.header("cookie", cookie);
            }
            let resp = req.send().await.expect("GET");
            assert_eq!(resp.status().as_u16(), 200, "{path}");
            resp.text().await.expect("body")
        }
    };
    for (who, cookie) in [("signed out", None), ("signed in", Some(cookie))] {
        let signed_in = cookie.is_some();
        let overview = as_browser("/", cookie.clone()).await;
        let live = first_live_event_as(&c, cookie.as_deref()).await;
        let agents = as_browser("/agents?state=stranded", cookie.clone()).await;
        assert!(agents.contains("agent-00001"), "{who}: {agents}");
        for (surface, html, action) in [
            ("overview", &overview, "href=\"/reconnect-stranded\""),
            ("live overview", &live, "href=\"/reconnect-stranded\""),
            (
                "agent list",
                &agents,
                "<button type=\"submit\">Reconnect</button>",
            ),
        ] {
            assert_eq!(
                html.contains(action),
                signed_in,
                "{who}, the {surface} offers {action}: {html}"
            );
        }
    }
    c.shutdown().await;
}

/// Guards the overview's story during an incident: counts, the root-cause
/// line for the expired proxy and for a NOT_SERVING auth server, the
/// stranded table, the auth strip, the TTL timeline with expired rows
/// marked, and the banner when the watcher goes stale.
#[tokio::test(start_paused = true)]
async fn overview_tells_what_failed_and_when() {
    let c = fleet().start().await;
    c.ready().await;
    let html = page(&c, "/").await;
    assert!(html.contains("Every agent is healthy"), "calm before");
    assert!(html.contains("✓ auth-1</strong> SERVING"), "auth strip");
    c.strand_two().await;

    let html = page(&c, "/").await;
    assert!(
        html.contains("<title>2 stranded · Lifeline</title>"),
        "title counts"
    );
    assert!(html.contains("2 agents stranded"), "root cause lead");
    assert!(
        html.contains("proxy-1 expired") || html.contains("proxy-2 expired"),
        "root cause names the proxy"
    );
    assert!(html.contains(" ago"), "and how long ago");
    assert!(
        html.contains("data-agent=\"agent-00001\""),
        "stranded table"
    );
    assert!(
        html.contains("class=\"row expired\""),
        "expired TTL rows marked"
    );
    assert!(html.contains("expired "), "TTL status text");
    assert!(html.contains("heartbeats missed"), "TTL tooltip");

    c.sim
        .set_auth_status("auth-1", ServingStatus::NotServing)
        .await;
    c.eventually("auth-1 NOT_SERVING", || async {
        page(&c, "/").await.contains("auth-1 NOT_SERVING since")
    })
    .await;
    let html = page(&c, "/").await;
    assert!(html.contains("✕ auth-1</strong> NOT_SERVING"), "{html}");
    assert!(html.contains("strands its agents"));

    // The stream that feeds Lifeline dies and stays down.
    c.sim.set_accepting(false);
    c.sim.kill_streams();
    c.eventually("stale banner", || async {
        page(&c, "/").await.contains("data is stale")
    })
    .await;
    let html = page(&c, "/").await;
    assert!(html.contains("role=\"alert\""), "{html}");
    assert!(
        html.contains("Agent states are frozen"),
        "says what it means"
    );
    c.shutdown().await;
}

/// Guards the storm-guard banner: when automatic reconnects pause, the
/// overview says so and why.
#[tokio::test(start_paused = true)]
async fn overview_says_when_automatic_reconnects_are_paused() {
    let c = Cluster::storm().start().await;
    c.ready().await;
    c.strand_everyone().await;
    let html = page(&c, "/").await;
    assert!(html.contains("Automatic reconnects are paused"), "{html}");
    assert!(html.contains("storm guard"), "the reason");
    assert!(
        html.contains("Expected when most of the fleet shares the server that failed"),
        "why a trip is expected: {html}"
    );
    assert!(html.contains("automatic reconnects paused"));
    c.shutdown().await;
}

/// Guards the reconnect form: refused without the CSRF cookie, with a
/// wrong token, or from another site; accepted with both, answering 303 to
/// the agent's page, which shows the signal's outcome; audited as `ui`.
/// With `Accept: application/json` (the page's JS) it answers the row.
#[tokio::test(start_paused = true)]
async fn reconnect_form_is_csrf_protected_and_works_without_js() {
    let c = Cluster::two_stranded_by_hand().await;
    let path = format!("/agents/{AGENT}");
    let (cookie, token) = form_token(&c, &path).await;
    let action = format!("{path}/reconnect");

    let (status, _, html) = post_form(&c, &action, &[("csrf", &token)], Form::default()).await;
    assert_eq!(status, 403);
    assert!(html.contains("CSRF cookie"), "{html}");
    let (status, _, html) =
        post_form(&c, &action, &[("csrf", "00ff")], Form::cookie(&cookie)).await;
    assert_eq!(status, 403);
    assert!(html.contains("does not match"), "{html}");
    let (status, _, body) = post_form(
        &c,
        &action,
        &[("csrf", &token)],
        Form::cookie(&cookie)
            .json()
            .header("sec-fetch-site", "cross-site"),
    )
    .await;
    assert_eq!(status, 403);
    assert!(
        body.contains("\"code\":\"csrf\""),
        "JSON for the JS: {body}"
    );
    let (status, _, html) = post_form(&c, &action, &[("nope", "1")], Form::cookie(&cookie)).await;
    assert_eq!(status, 400, "{html}");
    assert!(html.contains("invalid form"), "{html}");
    // A valid form from a browser that has not signed in: 401, with the way out.
    let (status, _, html) = post_form(
        &c,
        &action,
        &[("csrf", &token)],
        Form::cookie(&cookie).anonymous(),
    )
    .await;
    assert_eq!(status, 401, "{html}");
    assert!(
        html.contains("sign in") && html.contains("/signin"),
        "{html}"
    );
    let (status, _, body) = post_form(
        &c,
        &action,
        &[("csrf", &token)],
        Form::cookie(&cookie).anonymous().json(),
    )
    .await;
    assert_eq!(status, 401);
    assert!(body.contains("\"code\":\"unauthenticated\""), "{body}");
    assert_eq!(
        c.ok("/api/v1/signals").await["items"]
            .as_array()
            .map(Vec::len),
        Some(0),
        "no refused form sent anything"
    );

    let (status, headers, _) = post_form(
        &c,
        &action,
        &[
            ("csrf", &token),
            ("proxy", "proxy-1"),
            ("reason", "from the UI"),
        ],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 303);
    let to = headers["location"].to_str().unwrap().to_string();
    assert!(to.starts_with(&format!("{path}?signal=")), "{to}");
    let id: i64 = to
        .trim_start_matches(&format!("{path}?signal="))
        .trim_end_matches("#signal")
        .parse()
        .unwrap();
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    assert_eq!(row["requested_by"], "ui:admin");
    assert_eq!(row["proxy"], "proxy-1");
    assert_eq!(row["reason"], "from the UI");
    c.eventually("acked", || async {
        c.ok(&format!("/api/v1/signals/{id}")).await["outcome"] == "acked"
    })
    .await;
    let html = page(&c, &to.replace("#signal", "")).await;
    assert!(
        html.contains(&format!("#{id}</a>: <strong>✓ acked")),
        "{html}"
    );
    c.advance_until("not stranded", Duration::from_secs(5), || async {
        c.ok(&format!("/api/v1/agents/{AGENT}")).await["state"] != "stranded"
    })
    .await;

    // Again at once: manual reconnects of one agent are rate-limited.
    let (status, headers, body) = post_form(
        &c,
        &action,
        &[("csrf", &token)],
        Form::cookie(&cookie).json(),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("\"code\":\"rate_limited\""), "{body}");
    assert_eq!(headers["retry-after"], "10");
    c.advance(Duration::from_secs(10)).await;

    // The JS path: same form, JSON answer.
    let (status, _, body) = post_form(
        &c,
        &action,
        &[("csrf", &token)],
        Form::cookie(&cookie).json(),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["agent"], AGENT);

    // Refusals from the hub are pages too.
    let (status, _, html) = post_form(
        &c,
        "/agents/agent-99999/reconnect",
        &[("csrf", &token)],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 404);
    assert!(html.contains("agent-99999&#34; not found"), "{html}");
    c.shutdown().await;
}

/// Guards "Reconnect all stranded": the confirmation says how many agents
/// it will touch; confirming signals exactly those and lands on the audit.
#[tokio::test(start_paused = true)]
async fn reconnect_all_stranded_confirms_the_count_first() {
    let c = Cluster::two_stranded_by_hand().await;
    let html = page(&c, "/reconnect-stranded").await;
    assert!(
        html.contains(
            "<strong id=\"confirm-count\">2</strong> of the <strong>2</strong> stranded agents"
        ),
        "{html}"
    );
    let (cookie, token) = form_token(&c, "/reconnect-stranded").await;
    let (status, headers, _) = post_form(
        &c,
        "/reconnect-stranded",
        &[("csrf", &token)],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 303);
    let to = headers["location"].to_str().unwrap();
    assert_eq!(to, "/signals?requested_by=ui&sent=2&skipped=0");
    let html = page(&c, to).await;
    assert!(
        html.contains("Reconnect sent to 2 stranded agent(s)"),
        "{html}"
    );
    let rows = c.ok("/api/v1/signals?requested_by=ui").await;
    let mut agents = support::strs(&rows["items"], "agent");
    agents.sort();
    assert_eq!(agents, vec!["agent-00001", "agent-00005"]);
    c.shutdown().await;
}

/// Guards the live overview: the stream sends a fresh fragment at once and
/// then the shared one as the fleet changes; streams are capped with a
/// clear 503; an open stream does not hold up shutdown.
#[tokio::test(start_paused = true)]
async fn live_stream_follows_the_fleet_and_is_capped() {
    let c = fleet()
        .config(|cfg| cfg.server.max_live_streams = 1)
        .start()
        .await;
    c.ready().await;
    let resp = c
        .http
        .get(format!("{}/live/overview", c.ll().base_url()))
        .send()
        .await
        .expect("live stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = resp;
    let mut seen = String::new();
    while !seen.contains("\n\n") {
        seen.push_str(&next_chunk(&mut body).await.expect("first event"));
    }
    assert!(seen.contains("Every agent is healthy"), "{seen}");

    let (status, v) = c.get("/live/overview").await;
    assert_eq!(status, 503);
    assert_eq!(v["error"]["code"], "too_many_streams", "{v}");

    c.strand_two().await;
    let mut later = String::new();
    for _ in 0..50 {
        c.advance(Duration::from_secs(1)).await;
        if let Some(chunk) = next_chunk(&mut body).await {
            later.push_str(&chunk);
        }
        if later.contains("2 agents stranded") {
            break;
        }
    }
    assert!(later.contains("2 agents stranded"), "live update: {later}");
    // Shutdown with the stream still open.
    c.shutdown().await;
}

/// The next chunk of a streamed body, waiting at most 10 s of real time.
async fn next_chunk(body: &mut reqwest::Response) -> Option<String> {
    support::real_timeout(Duration::from_secs(10), body.chunk())
        .await
        .and_then(Result::ok)
        .flatten()
        .map(|c| String::from_utf8_lossy(&c).to_string())
}

/// Guards bad input on the dashboard: a clear error page naming the
/// parameter, never a panic or a blank page.
#[tokio::test(start_paused = true)]
async fn bad_queries_get_an_error_page_that_says_why() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    for (path, status, says) in [
        (
            "/agents?state=bogus",
            400,
            "state must be healthy, degraded, stranded or planned",
        ),
        (
            "/agents?limit=0",
            400,
            "limit must be a number between 1 and 500",
        ),
        ("/agents?limit=x", 400, "limit must be a number"),
        ("/agents?colour=red", 400, "unknown field"),
        ("/signals?outcome=maybe", 400, "outcome must be one of"),
        ("/signals?cursor=-3", 400, "not a valid cursor"),
        ("/signals?cursor=%ff%fe", 400, "not a valid cursor"),
        ("/agents?cursor=%ff%fe", 400, "not a valid cursor"),
        ("/ttl?kind=agent&cursor=%ff%fe", 400, "not a valid cursor"),
        (
            "/ttl?kind=tunnel",
            400,
            "kind must be proxy, auth_server or agent",
        ),
        ("/agents/agent-424242", 404, "agent-424242&#34; not found"),
        (
            "/agents/agent-00001?signal=x",
            400,
            "signal must be a signal id",
        ),
    ] {
        let (got, html) = c.get_text(path).await;
        assert_eq!(got, status, "{path}: {html}");
        assert!(html.contains(says), "{path}: {html}");
        assert!(html.contains("<!doctype html>"), "{path} is a page");
    }
    c.shutdown().await;
}

/// Guards paging on the agents page: next links carry the filters and the
/// cursor, pages do not overlap, the first-page link comes back.
#[tokio::test(start_paused = true)]
async fn agents_page_paginates_with_filters() {
    let c = Cluster::new().agents(7).quiet().start().await;
    c.ready().await;
    let first = page(&c, "/agents?limit=3&q=agent").await;
    let rows = |html: &str| -> Vec<String> {
        html.split("<tr data-agent=\"")
            .skip(1)
            .map(|s| s[..s.find('"').unwrap()].to_string())
            .collect()
    };
    assert_eq!(rows(&first), ["agent-00001", "agent-00002", "agent-00003"]);
    let next = first
        .split("href=\"")
        .find_map(|s| {
            let h = &s[..s.find('"').unwrap()];
            h.contains("cursor=")
                .then(|| h.replace("&#38;", "&").replace("&amp;", "&"))
        })
        .expect("a next link");
    assert!(next.contains("q=agent"), "{next}");
    assert!(next.contains("limit=3"), "{next}");
    let second = page(&c, &next).await;
    assert_eq!(rows(&second), ["agent-00004", "agent-00005", "agent-00006"]);
    assert!(second.contains("← First page"));
    c.shutdown().await;
}

/// Guards the live pages beyond the overview: each marks its live regions,
/// and `/live/changes` says `change` when the fleet's state changes (the
/// pages then fetch those regions again).
#[tokio::test(start_paused = true)]
async fn every_live_page_hears_the_fleet_change() {
    let c = fleet().start().await;
    c.ready().await;
    for (path, region) in [
        ("/agents", "id=\"agents-rows\" data-live"),
        ("/agents/agent-00001", "id=\"agent-head\" data-live"),
        ("/ttl", "id=\"ttl\" data-live"),
        ("/auth", "id=\"auth-live\" data-live"),
        ("/signals", "id=\"signals-live\" data-live"),
        ("/incidents", "id=\"incidents-live\" data-live"),
    ] {
        assert!(page(&c, path).await.contains(region), "{path} has {region}");
    }
    let mut stream = c
        .http
        .get(format!("{}/live/changes", c.ll().base_url()))
        .send()
        .await
        .expect("live changes");
    assert_eq!(stream.status().as_u16(), 200);
    assert!(stream.headers()["content-type"]
        .to_str()
        .unwrap_or_default()
        .starts_with("text/event-stream"));
    c.strand_two().await;
    let mut text = String::new();
    while !text.contains("\n\n") {
        text.push_str(&next_chunk(&mut stream).await.expect("an event within 10 s"));
    }
    assert!(text.starts_with("event: change\n"), "{text}");
    c.shutdown().await;
}

/// Guards the maintenance page: a window declared through its form (CSRF
/// checked) is listed, named in every page's banner while active, and
/// ended through its button; a bad form says what is wrong.
#[tokio::test(start_paused = true)]
async fn maintenance_windows_are_declared_shown_and_ended_from_the_dashboard() {
    let c = fleet().start().await;
    c.ready().await;
    let (cookie, token) = form_token(&c, "/maintenance").await;
    let fields = [
        ("csrf", token.as_str()),
        ("targets", "proxy/proxy-1, agent/<b>x</b>"),
        ("length", "2h"),
        ("reason", "kernel <script>alert(1)</script>"),
    ];
    let (status, _, html) =
        post_form(&c, "/maintenance", &fields[..3], Form::cookie(&cookie)).await;
    assert_eq!(status, 400, "a form without its reason: {html}");
    let (status, _, _) = post_form(&c, "/maintenance", &fields, Form::default()).await;
    assert_eq!(status, 403, "no CSRF cookie");
    let (status, headers, html) =
        post_form(&c, "/maintenance", &fields, Form::cookie(&cookie)).await;
    assert_eq!(status, 303, "{html}");
    // The target that names nothing is said on the page it lands on.
    let location = headers["location"].to_str().unwrap_or_default().to_string();
    assert!(
        location.starts_with("/maintenance?done=window%201%20started%20%28target%20agent")
            && location.ends_with("#window-1"),
        "{location}"
    );
    let (_, page) = c.get_text(&location).await;
    assert!(page.contains("window 1 started (target agent/"), "{page}");
    assert!(page.contains("names nothing Lifeline knows now"), "{page}");
    assert!(
        page.contains("proxy/proxy-1 agent/&#60;b&#62;x&#60;/b&#62;")
            || page.contains("agent/&lt;b&gt;"),
        "escaped: {page}"
    );
    assert!(!page.contains("<script>alert"), "the reason is escaped");
    let (_, overview) = c.get_text("/").await;
    assert!(
        overview.contains("Maintenance window 1 active until"),
        "the banner: {overview}"
    );
    let (status, _, html) = post_form(
        &c,
        "/maintenance",
        &[
            ("csrf", &token),
            ("targets", "node/x"),
            ("length", "1h"),
            ("reason", "x"),
        ],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 400);
    assert!(html.contains("unknown target kind"), "{html}");
    // Refused on the form itself, with what was typed kept.
    assert!(
        html.contains("id=\"declare-error\" role=\"alert\">Not started:"),
        "{html}"
    );
    assert!(
        html.contains("value=\"node/x\"") && html.contains("value=\"x\""),
        "{html}"
    );
    assert!(
        html.contains("<h1>Maintenance</h1>"),
        "the page, not an error page: {html}"
    );
    let (status, _, html) = post_form(
        &c,
        "/maintenance",
        &[
            ("csrf", &token),
            ("targets", "agent/* proxy/<i>"),
            ("length", "2 fortnights"),
            ("reason", "patch <night>"),
            ("all", "1"),
        ],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 400);
    assert!(html.contains("Not started: for:"), "{html}");
    assert!(
        html.contains("value=\"agent/* proxy/&#60;i&#62;\"")
            && html.contains("value=\"2 fortnights\"")
            && html.contains("value=\"patch &#60;night&#62;\"")
            && html.contains("value=\"1\" checked"),
        "kept, escaped: {html}"
    );
    let (status, _, html) = post_form(
        &c,
        "/maintenance/1/end",
        &[("csrf", &token)],
        Form::cookie(&cookie),
    )
    .await;
    assert_eq!(status, 303, "{html}");
    let (_, overview) = c.get_text("/").await;
    assert!(
        !overview.contains("Maintenance window 1 active"),
        "no banner once ended"
    );
    let (_, page) = c.get_text("/maintenance").await;
    assert!(page.contains("ended by admin"), "{page}");
    c.shutdown().await;
}
