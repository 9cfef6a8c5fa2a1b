//! Signing in through Teleport's Application Access: a real Lifeline with
//! `[access.teleport]`, tokens signed with RSA and P-256 keys made here,
//! and a stand-in for the proxy's `/.well-known/jwks.json` (an axum
//! server whose key set the test changes, or makes hang).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use lifeline::config::{Role, TeleportAccessConfig};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::traits::PublicKeyParts;
use serde_json::{json, Value};

use crate::support::{Cluster, Running};

const AUDIENCE: &str = "https://lifeline.teleport.example.com";
const CLUSTER: &str = "teleport.example.com";

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A signing key and its public JWK.
struct Signer {
    kid: String,
    alg: Algorithm,
    key: EncodingKey,
    jwk: Value,
    /// The public key as PEM, for the HS256 confusion attack.
    public_pem: String,
}

fn rsa_signer(kid: &str) -> Signer {
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("RSA key");
    let public = private.to_public_key();
    let der = private.to_pkcs1_der().expect("PKCS#1");
    let public_pem =
        rsa::pkcs1::EncodeRsaPublicKey::to_pkcs1_pem(&public, Default::default()).expect("PEM");
    Signer {
        kid: kid.into(),
        alg: Algorithm::RS256,
        key: EncodingKey::from_rsa_der(der.as_bytes()),
        jwk: json!({
            "kty": "RSA", "alg": "RS256", "use": "sig", "kid": kid,
            "n": b64(&public.n().to_bytes_be()),
            "e": b64(&public.e().to_bytes_be()),
        }),
        public_pem,
    }
}

fn ec_signer(kid: &str) -> Signer {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key");
    let raw = pair.public_key_raw();
    assert_eq!(raw.len(), 65, "an uncompressed point");
    Signer {
        kid: kid.into(),
        alg: Algorithm::ES256,
        key: EncodingKey::from_ec_der(&pair.serialize_der()),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
            "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
        }),
        public_pem: pair.public_key_pem(),
    }
}

/// Teleport's claims for `user` with `roles`, valid now on `c`'s clock.
fn claims(c: &Running, user: &str, roles: &[&str]) -> Value {
    let now = c.ll().clock.now().as_micros() / 1_000_000;
    json!({
        "sub": user, "username": user, "roles": roles,
        "traits": {"logins": ["root"], "team": ["sre"]},
        "iss": CLUSTER, "aud": [AUDIENCE],
        "nbf": now - 10, "iat": now, "exp": now + 600,
    })
}

fn sign(s: &Signer, claims: &Value) -> String {
    let mut h = Header::new(s.alg);
    h.kid = (!s.kid.is_empty()).then(|| s.kid.clone());
    jsonwebtoken::encode(&h, claims, &s.key).expect("signed")
}

/// The proxy's key set: what it serves, whether it hangs, how often asked.
#[derive(Clone, Default)]
struct Jwks {
    keys: Arc<Mutex<Vec<Value>>>,
    hang: Arc<AtomicBool>,
    fetches: Arc<AtomicUsize>,
}

impl Jwks {
    async fn serve(&self) -> String {
        let me = self.clone();
        let app = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                let me = me.clone();
                async move {
                    me.fetches.fetch_add(1, Ordering::SeqCst);
                    if me.hang.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    let keys = me.keys.lock().expect("keys").clone();
                    axum::Json(json!({ "keys": keys }))
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(l, app).await });
        format!("http://{addr}/.well-known/jwks.json")
    }

    fn set(&self, signers: &[&Signer]) {
        *self.keys.lock().expect("keys") = signers.iter().map(|s| s.jwk.clone()).collect();
    }
}

async fn start(jwks: &Jwks) -> Running {
    let url = jwks.serve().await;
    Cluster::new()
        .agents(2)
        .sim_agents(0.0)
        .config(move |cfg| {
            cfg.access.teleport = Some(TeleportAccessConfig {
                jwks_url: url,
                ca_file: None,
                audience: AUDIENCE.into(),
                cluster_name: CLUSTER.into(),
                roles_map: [
                    ("editor".to_string(), vec![Role::Read, Role::Update]),
                    ("access".to_string(), vec![Role::Read]),
                ]
                .into(),
                traits_map: vec![lifeline::config::TraitGrant {
                    name: "team".into(),
                    value: "oncall".into(),
                    roles: vec![Role::Update],
                }],
                leeway: Duration::from_secs(30),
                refresh_min_interval: Duration::from_secs(30),
                jwks_timeout: Duration::from_secs(2),
            });
        })
        .start()
        .await
}

/// A GET with the JWT in Teleport's header.
async fn get_as(c: &Running, path: &str, jwt: &str) -> (u16, Value) {
    let url = format!("{}{path}", c.ll().base_url());
    let r = crate::support::bounded(
        "a GET with a Teleport JWT",
        c.http
            .get(&url)
            .header("Teleport-Jwt-Assertion", jwt)
            .send(),
    )
    .await
    .expect("HTTP");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn refused_for(status: u16, body: &Value, says: &str) {
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "invalid_teleport_jwt", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(says), "{message:?} should say {says:?}");
}

/// A Teleport user's JWT (RS256 or ES256) signs them in with the Lifeline
/// roles their Teleport roles map to, and their name is the actor in the
/// audit; every forged, stale or misdirected token is refused with a 401
/// that names what is wrong; API tokens go on working beside it.
#[tokio::test(start_paused = true)]
async fn a_teleport_jwt_signs_its_user_in_and_every_bad_one_is_refused_by_name() {
    let (rsa, ec) = (rsa_signer("rsa-1"), ec_signer("ec-1"));
    let jwks = Jwks::default();
    jwks.set(&[&rsa, &ec]);
    let c = start(&jwks).await;
    c.ready().await;

    // Signed in: reads with `access`, and a reconnect with `editor`,
    // recorded as the Teleport user's.
    let reader = sign(&rsa, &claims(&c, "bob", &["access"]));
    assert_eq!(get_as(&c, "/api/v1/summary", &reader).await.0, 200);
    let editor = sign(&ec, &claims(&c, "alice@example.com", &["editor"]));
    assert_eq!(get_as(&c, "/api/v1/summary", &editor).await.0, 200);
    let agent = c.agents[0].name.clone();
    let post = |jwt: String| {
        c.http
            .post(format!(
                "{}/api/v1/agents/{agent}/reconnect",
                c.ll().base_url()
            ))
            .header("Teleport-Jwt-Assertion", jwt)
            .header("content-type", "application/json")
            .body(r#"{"reason":"through Teleport"}"#)
            .send()
    };
    let r = post(editor.clone()).await.expect("POST");
    let status = r.status();
    let body = r.json::<Value>().await.expect("JSON");
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("id");
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    assert_eq!(row["requested_by"], "api:alice@example.com", "{row}");
    // `access` alone may not change anything; the trait map grants too.
    let r = post(reader.clone()).await.expect("POST");
    assert_eq!(r.status(), 403);
    let mut oncall = claims(&c, "carol", &["access"]);
    oncall["traits"]["team"] = json!(["oncall"]);
    let r = post(sign(&rsa, &oncall)).await.expect("POST");
    // Signed in with `update`: asked (202), or held back by the agent's
    // manual-reconnect interval since alice's (429); never 401 or 403.
    assert!(
        [202, 429].contains(&r.status().as_u16()),
        "team=oncall grants update: {}",
        r.status()
    );
    // Tokens keep working beside it.
    let (status, _) = c
        .get_text_as("/api/v1/summary", crate::support::READER)
        .await;
    assert_eq!(status, 200);

    // Each refusal says why.
    let base = claims(&c, "mallory", &["editor"]);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut v = base.clone();
        f(&mut v);
        v
    };
    let now = base["iat"].as_i64().expect("iat");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            sign(&rsa, &with(&|v| v["exp"] = json!(now - 120))),
            "expired",
        ),
        (
            "not yet valid",
            sign(&rsa, &with(&|v| v["nbf"] = json!(now + 600))),
            "not valid before",
        ),
        (
            "wrong aud",
            sign(
                &rsa,
                &with(&|v| v["aud"] = json!(["https://grafana.example.com"])),
            ),
            "audience",
        ),
        (
            "wrong iss",
            sign(&rsa, &with(&|v| v["iss"] = json!("leaf.example.com"))),
            "issued by",
        ),
        (
            "alg none",
            format!(
                "{}.{}.",
                b64(br#"{"alg":"none","typ":"JWT"}"#),
                b64(base.to_string().as_bytes())
            ),
            "\"none\"",
        ),
        (
            "HS256 with the public key as its secret",
            {
                let mut h = Header::new(Algorithm::HS256);
                h.kid = Some("rsa-1".into());
                jsonwebtoken::encode(
                    &h,
                    &base,
                    &EncodingKey::from_secret(rsa.public_pem.as_bytes()),
                )
                .expect("HS256")
            },
            "\"HS256\"",
        ),
        (
            "an unknown kid",
            sign(&rsa_signer("nobody"), &base),
            "no key of the cluster's key set is \"nobody\"",
        ),
        (
            "a tampered payload",
            {
                let good = sign(&rsa, &base);
                let parts: Vec<&str> = good.split('.').collect();
                let forged = with(&|v| v["roles"] = json!(["editor", "admin"]));
                format!(
                    "{}.{}.{}",
                    parts[0],
                    b64(forged.to_string().as_bytes()),
                    parts[2]
                )
            },
            "signature",
        ),
        ("too large", "a".repeat(20_000), "bytes, more than"),
    ];
    for (what, jwt, says) in cases {
        let (status, body) = get_as(&c, "/api/v1/summary", &jwt).await;
        eprintln!("{what}: {status} {}", body["error"]["message"]);
        refused_for(status, &body, says);
    }
    // ES256 with a P-256 key whose kid is empty (older Teleport): tried
    // against every key.
    let unnamed = ec_signer("");
    jwks.set(&[&rsa, &ec, &unnamed]);
    c.advance(Duration::from_secs(31)).await;
    assert_eq!(
        get_as(&c, "/api/v1/summary", &sign(&unnamed, &base))
            .await
            .0,
        200
    );
    c.shutdown().await;
}

/// A CA rotation: a token signed with a key the cached set lacks has the
/// set fetched again, and is taken without a restart; fetches asked for by
/// unknown keys are rate-limited; a key set that hangs holds no request
/// past `jwks_timeout`, and the keys already held go on working.
#[tokio::test(start_paused = true)]
async fn keys_rotate_without_a_restart_and_a_hanging_key_set_holds_no_request() {
    let old = rsa_signer("old");
    let jwks = Jwks::default();
    jwks.set(&[&old]);
    let c = start(&jwks).await;
    c.ready().await;
    let user = claims(&c, "alice", &["access"]);
    assert_eq!(
        get_as(&c, "/api/v1/summary", &sign(&old, &user)).await.0,
        200
    );
    let fetched = jwks.fetches.load(Ordering::SeqCst);
    assert_eq!(fetched, 1, "fetched once, then cached");
    assert_eq!(
        get_as(&c, "/api/v1/summary", &sign(&old, &user)).await.0,
        200
    );
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 1, "the cached key");

    // Rotation: the proxy now lists the new key beside the old one.
    c.advance(Duration::from_secs(31)).await;
    let new = ec_signer("new");
    jwks.set(&[&old, &new]);
    assert_eq!(
        get_as(&c, "/api/v1/summary", &sign(&new, &user)).await.0,
        200
    );
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 2, "fetched again once");
    // Unknown keys within the interval ask for no more fetches.
    for i in 0..5 {
        let (status, body) = get_as(
            &c,
            "/api/v1/summary",
            &sign(&ec_signer(&format!("x{i}")), &user),
        )
        .await;
        refused_for(status, &body, "no key of the cluster's key set");
    }
    assert_eq!(jwks.fetches.load(Ordering::SeqCst), 2, "rate-limited");

    // The key set hangs: a token naming a new key is refused once the
    // fetch has had its time, and the keys held still sign in.
    c.advance(Duration::from_secs(31)).await;
    jwks.hang.store(true, Ordering::SeqCst);
    let url = format!("{}/api/v1/summary", c.ll().base_url());
    let pending = tokio::spawn({
        let (http, jwt) = (c.http.clone(), sign(&ec_signer("newer"), &user));
        async move {
            let r = http
                .get(url)
                .header("Teleport-Jwt-Assertion", jwt)
                .send()
                .await
                .expect("HTTP");
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    });
    c.eventually("the fetch under way", || async {
        jwks.fetches.load(Ordering::SeqCst) == 3
    })
    .await;
    assert_eq!(
        get_as(&c, "/api/v1/summary", &sign(&new, &user)).await.0,
        200,
        "a held key signs in while the fetch hangs"
    );
    c.advance(Duration::from_secs(3)).await;
    let (status, body) = crate::support::bounded("the held request", pending)
        .await
        .expect("joined");
    refused_for(
        status,
        &body,
        "no key of the cluster's key set is \"newer\"",
    );
    c.shutdown().await;
}
