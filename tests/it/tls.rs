//! Lifeline on a network: both listeners over TLS with certificates made in
//! the test, real handshakes on loopback. A client that does not trust the
//! CA is refused, an agent without a client certificate cannot open its
//! signal stream, new certificate files are served without a restart, the
//! CLI and a `ClusterEvents` source speak https, and the browser's cookies
//! and HSTS follow.

use std::sync::Arc;

use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;
use lifeline_sim::agent::{join_request, lifeline_channel};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio_stream::wrappers::ReceiverStream;

use crate::support::{bounded, cli, Cluster, Running, ADMIN};

/// The value of the series `name{labels}` (labels exactly as rendered) in
/// `/metrics`, or 0.
async fn metric(c: &Running, series: &str) -> f64 {
    let (_, text) = c.get_text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// The subject of the certificate Lifeline's HTTP listener presents to a
/// client that trusts the test CA.
async fn served_subject(c: &Running) -> String {
    let tls = c.tls.as_ref().expect("TLS test");
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(tls.ca.pem().as_bytes()).expect("CA"))
        .expect("root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(c.ll().http_addr)
        .await
        .expect("connect");
    let conn = bounded(
        "a handshake",
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").expect("name"), tcp),
    )
    .await
    .expect("handshake");
    let der = conn.get_ref().1.peer_certificates().expect("certs")[0].clone();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("X.509");
    cert.subject().to_string()
}

/// Guards TLS on both listeners: agents with client certificates connect
/// over gRPC TLS and the API answers over HTTPS; every response carries
/// HSTS and every cookie is `Secure`; a client that does not trust the CA,
/// or speaks plaintext, gets no answer and the failure is counted.
#[tokio::test(start_paused = true)]
async fn both_listeners_serve_tls_and_an_untrusting_client_is_refused() {
    let c = Cluster::six_legacy().tls(true).start().await;
    assert!(c.ll().base_url().starts_with("https://"));
    c.ready().await;
    let s = c.summary().await;
    assert_eq!(s["agents"]["total"], 6, "{s}");
    assert_eq!(
        s["signals"]["connected_agents"], 6,
        "agents over gRPC TLS: {s}"
    );

    let page = bounded(
        "GET /",
        c.http.get(format!("{}/", c.ll().base_url())).send(),
    )
    .await
    .expect("dashboard");
    assert_eq!(
        page.headers()["strict-transport-security"],
        lifeline::http::HSTS
    );
    let cookie = page.headers()["set-cookie"].to_str().expect("cookie");
    assert!(
        cookie.contains("Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );

    // Sign in over HTTPS: the session cookie is Secure too.
    let base = c.ll().base_url();
    let (csrf_cookie, csrf) = crate::support::signin_csrf(&c.http, &base).await;
    let signed_in = bounded(
        "sign in",
        c.http
            .post(format!("{base}/signin"))
            .header("cookie", &csrf_cookie)
            .form(&[("csrf", csrf.as_str()), ("token", ADMIN), ("next", "/")])
            .send(),
    )
    .await
    .expect("signed in");
    assert_eq!(signed_in.status().as_u16(), 303);
    let session = signed_in.headers()["set-cookie"].to_str().expect("cookie");
    assert!(
        session.starts_with("lifeline_session=") && session.contains("Secure"),
        "{session}"
    );

    let untrusting = reqwest::Client::new();
    let e = bounded(
        "an untrusting client",
        untrusting
            .get(format!("{}/api/v1/summary", c.ll().base_url()))
            .send(),
    )
    .await
    .expect_err("refused");
    assert!(e.is_connect(), "{e:?}");
    let plain = bounded(
        "a plaintext client",
        reqwest::get(format!("http://{}/api/v1/summary", c.ll().http_addr)),
    )
    .await;
    assert!(plain.is_err(), "plaintext got an answer: {plain:?}");
    c.eventually("the refused handshakes counted", || async {
        metric(
            &c,
            "lifeline_tls_handshake_failures_total{listener=\"http\"}",
        )
        .await
            >= 2.0
    })
    .await;
    let expiry = metric(&c, "lifeline_tls_certificate_expiry_timestamp_seconds").await;
    assert!(
        expiry > 4.0e9,
        "rcgen's default validity runs to 4096: {expiry}"
    );
    c.shutdown().await;
}

/// Guards `server.agent_client_ca`: without a client certificate the
/// connection is made (health checks need none) but `AgentSignals.Connect`
/// is refused, naming what is missing and counted; a certificate from
/// another CA fails the handshake; the test CA's is admitted.
#[tokio::test(start_paused = true)]
async fn an_agent_without_a_client_certificate_is_refused() {
    let c = Cluster::new().quiet().tls(true).start().await;
    c.ready().await;
    let tls = c.tls.as_ref().expect("TLS");
    let grpc = c.ll().grpc_addr;
    let connect = |ch: tonic::transport::Channel| async move {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(pb::AgentMessage::hello("agent-00000", "test", 2))
            .await
            .expect("hello queued");
        let r = AgentSignalsClient::new(ch)
            .connect(join_request(
                ReceiverStream::new(rx),
                lifeline_sim::SIM_JOIN_TOKEN,
            ))
            .await;
        (r, tx)
    };

    let no_cert = lifeline_channel(tls.agent_addr(grpc, false)).expect("channel");
    let mut health = tonic_health::pb::health_client::HealthClient::new(no_cert.clone());
    let h = bounded(
        "health without a client certificate",
        health.check(tonic_health::pb::HealthCheckRequest::default()),
    )
    .await
    .expect("health answers without a client certificate");
    assert_eq!(h.into_inner().status, 1, "SERVING");
    let (r, _tx) = bounded("Connect without a certificate", connect(no_cert)).await;
    let status = r.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated);
    assert!(
        status.message().contains("client certificate")
            && status.message().contains("server.agent_client_ca"),
        "{}",
        status.message()
    );
    assert!(metric(&c, "lifeline_agent_join_refused_total").await >= 1.0);

    let other = lifeline_sim::pki::Ca::new("another CA").expect("CA");
    let foreign = other.issue("intruder", &[]).expect("cert");
    let addr = lifeline_sim::agent::LifelineAddr::tls(
        grpc,
        tls.ca.pem(),
        Some((&foreign.cert_pem, &foreign.key_pem)),
    );
    let (r, _tx) = bounded(
        "Connect with a foreign certificate",
        connect(lifeline_channel(addr).expect("channel")),
    )
    .await;
    assert!(r.is_err(), "a certificate from another CA was admitted");

    let ok = lifeline_channel(tls.agent_addr(grpc, true)).expect("channel");
    let (r, _tx) = bounded("Connect with the test CA's certificate", connect(ok)).await;
    assert!(r.is_ok(), "{:?}", r.err());
    c.shutdown().await;
}

/// Guards hot reload: new certificate files are served to new connections
/// without a restart; a key that does not match them is refused and the
/// previous certificate stays; each outcome is counted.
#[tokio::test(start_paused = true)]
async fn new_certificate_files_are_served_without_a_restart() {
    let c = Cluster::new().quiet().tls(false).start().await;
    c.ready().await;
    let tls = c.tls.as_ref().expect("TLS");
    assert!(served_subject(&c).await.contains("lifeline"));
    let every = c.cfg.server.tls_reload_interval;

    // A renewal that wrote only the certificate so far: refused.
    let renewed = tls
        .ca
        .issue("lifeline renewed", &["localhost"])
        .expect("cert");
    std::fs::write(&tls.cert, &renewed.cert_pem).expect("write cert");
    c.advance(every).await;
    c.eventually("the half-written pair refused", || async {
        metric(&c, "lifeline_tls_reloads_total{outcome=\"refused\"}").await == 1.0
    })
    .await;
    let subject = served_subject(&c).await;
    assert!(
        subject.contains("lifeline") && !subject.contains("renewed"),
        "{subject}"
    );

    // The key lands: served from the next look on.
    std::fs::write(&tls.key, &renewed.key_pem).expect("write key");
    c.advance(every).await;
    c.eventually("the new pair loaded", || async {
        metric(&c, "lifeline_tls_reloads_total{outcome=\"loaded\"}").await == 1.0
    })
    .await;
    assert!(served_subject(&c).await.contains("lifeline renewed"));
    // The API still answers, over the new certificate.
    assert_eq!(c.summary().await["agents"]["total"], 6);
    c.shutdown().await;
}

/// Guards `systemctl reload` (SIGHUP): asked to, Lifeline reads new
/// certificate files at once, not at its next look.
#[tokio::test(start_paused = true)]
async fn new_certificate_files_are_served_at_once_when_asked_to_read_them() {
    let c = Cluster::new().quiet().tls(false).start().await;
    c.ready().await;
    let tls = c.tls.as_ref().expect("TLS");
    let renewed = tls
        .ca
        .issue("lifeline reread", &["localhost"])
        .expect("cert");
    std::fs::write(&tls.cert, &renewed.cert_pem).expect("write cert");
    std::fs::write(&tls.key, &renewed.key_pem).expect("write key");
    // Virtual time stands still: only the request can bring the new pair in.
    let _hold = crate::support::hold_clock();
    c.ll().reread_files();
    c.eventually("the new pair loaded", || async {
        metric(&c, "lifeline_tls_reloads_total{outcome=\"loaded\"}").await == 1.0
    })
    .await;
    assert!(served_subject(&c).await.contains("lifeline reread"));
    c.shutdown().await;
}

/// Guards the CLI over https: with `--ca-file` it reaches the API; without
/// it the error says the certificate was not trusted; a CA file that is
/// not PEM is named.
#[tokio::test(start_paused = true)]
async fn the_cli_speaks_https_with_a_ca_file() {
    let c = Cluster::new().quiet().tls(false).start().await;
    c.ready().await;
    let ca = c.tls.as_ref().expect("TLS").ca_file.display().to_string();
    let (code, out, err) = cli(&c, &["settings", "get", "--ca-file", &ca]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"auto_reconnect\""), "{out}");
    let (code, _, err) = cli(&c, &["settings", "get"]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot reach Lifeline") && err.to_lowercase().contains("certificate"),
        "{err}"
    );
    let (code, _, err) = cli(&c, &["settings", "get", "--ca-file", file!()]).await;
    assert_ne!(code, 0);
    assert!(err.contains("--ca-file"), "{err}");
    let (code, out, err) = cli(
        &c,
        &[
            "reconnect",
            "agent-00001",
            "--ca-file",
            &ca,
            "--token",
            ADMIN,
            "--wait",
            "1s",
        ],
    )
    .await;
    // Reached over https with the token: Lifeline itself answers that the
    // agent (no simulated agents here) has no signal stream.
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("not_connected") && err.contains("agent-00001"),
        "{code} {out} {err}"
    );
    c.shutdown().await;
}

/// Guards a `lifeline`-protocol cluster over https: Lifeline dials the
/// simulator's `ClusterEvents` over TLS, trusting `cluster.ca_file`.
#[tokio::test(start_paused = true)]
async fn a_cluster_events_source_over_https() {
    let c = Cluster::new().quiet().cluster_tls().start().await;
    assert!(c.cfg.cluster.addr.starts_with("https://"));
    c.ready().await;
    let s = c.summary().await;
    assert_eq!(s["agents"]["total"], 6, "{s}");
    c.shutdown().await;
}

/// Guards the HTTP edge without TLS: no HSTS and no `Secure` cookie, which
/// a browser on plain http:// would not send back.
#[tokio::test(start_paused = true)]
async fn plaintext_sets_no_hsts_and_no_secure_cookie() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let page = bounded(
        "GET /",
        c.http.get(format!("{}/", c.ll().base_url())).send(),
    )
    .await
    .expect("dashboard");
    assert!(page.headers().get("strict-transport-security").is_none());
    let cookie = page.headers()["set-cookie"].to_str().expect("cookie");
    assert!(!cookie.contains("Secure"), "{cookie}");
    c.shutdown().await;
}
