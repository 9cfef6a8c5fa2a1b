//! A small client of Lifeline's REST API, for the command line
//! (`lifeline reconnect`, `lifeline settings`). Speaks only the public
//! API, over `http://` or `https://` (rustls, trusting the system's roots
//! and, when given, a CA file).

use std::path::Path;

use lifeline::backoff::chain;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach Lifeline at {url}: {detail}")]
    Http { url: String, detail: String },
    #[error("--ca-file {path}: {detail}")]
    CaFile { path: String, detail: String },
    /// Lifeline answered with an error body.
    #[error("{status} {code}: {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    #[error("unexpected answer from {url}: {detail}")]
    Decode { url: String, detail: String },
    #[error("invalid server URL {0:?}: {1}")]
    Url(String, String),
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorInner,
}

#[derive(Deserialize)]
struct ErrorInner {
    code: String,
    message: String,
}

#[derive(Debug, Deserialize)]
pub struct Skipped {
    pub agent: String,
    pub reason: String,
}

#[derive(Debug, Deserialize)]
pub struct Reconnects {
    pub matched: usize,
    pub signals: Vec<SignalRecordIn>,
    pub skipped: Vec<Skipped>,
}

/// The fields of a signal row (`store::signals::SignalRecord` as JSON) the
/// CLI prints.
#[derive(Debug, Clone, Deserialize)]
pub struct SignalRecordIn {
    pub id: i64,
    pub agent: String,
    pub outcome: String,
    #[serde(default)]
    pub detail: String,
    pub latency_ms: Option<f64>,
}

impl SignalRecordIn {
    /// True once nothing more will happen to the signal.
    pub fn is_final(&self) -> bool {
        matches!(
            self.outcome.as_str(),
            "acked" | "failed" | "undeliverable" | "timeout"
        )
    }
}

/// What to do about an untrusted certificate, said where it happens.
fn with_hint(detail: String) -> String {
    if detail.contains("UnknownIssuer") {
        format!("{detail} (Lifeline's certificate is not signed by a CA this machine trusts: pass it with --ca-file or LIFELINE_CA_FILE)")
    } else {
        detail
    }
}

/// The certificates in a PEM file; at least one.
fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let err = |detail: String| ClientError::CaFile {
        path: path.display().to_string(),
        detail,
    };
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&bytes)
        .map_err(|e| err(format!("not PEM certificates: {}", chain(&e))))?;
    if certs.is_empty() {
        return Err(err("holds no CERTIFICATE section".into()));
    }
    Ok(certs)
}

pub struct Client {
    base: String,
    http: reqwest::Client,
    /// Sent as `Authorization: Bearer` (never printed).
    token: Option<String>,
}

impl Client {
    /// A client of the Lifeline at `server`; over `https://` it also
    /// trusts the CA certificates (PEM) in `ca_file`.
    pub fn new(
        server: &str,
        token: Option<String>,
        ca_file: Option<&Path>,
    ) -> Result<Client, ClientError> {
        let u =
            url::Url::parse(server).map_err(|e| ClientError::Url(server.into(), e.to_string()))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(ClientError::Url(
                server.into(),
                "use http:// or https://".into(),
            ));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .https_only(u.scheme() == "https");
        if let Some(path) = ca_file {
            for cert in ca_certificates(path)? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(|e| ClientError::Http {
            url: server.into(),
            detail: chain(&e),
        })?;
        Ok(Client {
            base: server.trim_end_matches('/').to_string(),
            http,
            token: token.filter(|t| !t.trim().is_empty()),
        })
    }

    async fn call(&self, req: reqwest::RequestBuilder, url: &str) -> Result<Value, ClientError> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t.trim()),
            None => req,
        };
        let resp = req
            .header("x-requested-by", "cli")
            .send()
            .await
            .map_err(|e| ClientError::Http {
                url: url.into(),
                detail: with_hint(chain(&e)),
            })?;
        let status = resp.status().as_u16();
        let text = resp.text().await.map_err(|e| ClientError::Http {
            url: url.into(),
            detail: chain(&e),
        })?;
        if !(200..300).contains(&status) {
            return Err(match serde_json::from_str::<ErrorBody>(&text) {
                Ok(b) => ClientError::Api {
                    status,
                    code: b.error.code,
                    message: b.error.message,
                },
                Err(_) => ClientError::Api {
                    status,
                    code: "http".into(),
                    message: text.chars().take(200).collect(),
                },
            });
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Decode {
            url: url.into(),
            detail: e.to_string(),
        })
    }

    fn decode<T: for<'de> Deserialize<'de>>(v: Value, url: &str) -> Result<T, ClientError> {
        serde_json::from_value(v).map_err(|e| ClientError::Decode {
            url: url.into(),
            detail: e.to_string(),
        })
    }

    pub async fn reconnect(
        &self,
        agent: &str,
        proxy: Option<&str>,
        reason: Option<&str>,
    ) -> Result<SignalRecordIn, ClientError> {
        let url = format!(
            "{}/api/v1/agents/{}/reconnect",
            self.base,
            url::form_urlencoded::byte_serialize(agent.as_bytes()).collect::<String>()
        );
        let body = json!({"proxy": proxy, "reason": reason});
        let v = self.call(self.http.post(&url).json(&body), &url).await?;
        Self::decode(v, &url)
    }

    pub async fn reconnect_stranded(
        &self,
        reason: Option<&str>,
    ) -> Result<Reconnects, ClientError> {
        let url = format!("{}/api/v1/reconnects", self.base);
        let body = json!({"state": "stranded", "reason": reason});
        let v = self.call(self.http.post(&url).json(&body), &url).await?;
        Self::decode(v, &url)
    }

    fn setting_url(&self, name: &str) -> String {
        format!(
            "{}/api/v1/settings/{}",
            self.base,
            url::form_urlencoded::byte_serialize(name.as_bytes()).collect::<String>()
        )
    }

    /// `GET /api/v1/settings` (all) or `/api/v1/settings/{name}`.
    pub async fn settings_get(&self, name: Option<&str>) -> Result<Value, ClientError> {
        let url = match name {
            Some(n) => self.setting_url(n),
            None => format!("{}/api/v1/settings", self.base),
        };
        self.call(self.http.get(&url), &url).await
    }

    pub async fn settings_set(
        &self,
        name: &str,
        value: Value,
        force: bool,
        confirm: bool,
    ) -> Result<Value, ClientError> {
        let url = format!("{}?force={force}&confirm={confirm}", self.setting_url(name));
        let body = json!({ "value": value });
        self.call(self.http.put(&url).json(&body), &url).await
    }

    pub async fn settings_rm(&self, name: &str) -> Result<Value, ClientError> {
        let url = self.setting_url(name);
        self.call(self.http.delete(&url), &url).await
    }

    /// `POST /api/v1/maintenance`.
    pub async fn maintenance_start(&self, body: &Value) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1/maintenance", self.base);
        self.call(self.http.post(&url).json(body), &url).await
    }

    /// `POST /api/v1/maintenance/{id}/end`.
    pub async fn maintenance_end(&self, id: i64) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1/maintenance/{id}/end", self.base);
        self.call(self.http.post(&url), &url).await
    }

    /// `DELETE /api/v1/maintenance/{id}`.
    pub async fn maintenance_delete(&self, id: i64) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1/maintenance/{id}", self.base);
        self.call(self.http.delete(&url), &url).await
    }

    /// The server's time: the fleet's, as its summary says it.
    pub async fn server_now(&self) -> Result<Option<lifeline::clock::Ts>, ClientError> {
        let url = format!("{}/api/v1/summary", self.base);
        let v = self.call(self.http.get(&url), &url).await?;
        Ok(v["generated_at"]
            .as_str()
            .and_then(lifeline::clock::Ts::parse_rfc3339))
    }

    /// `GET /api/v1/maintenance` (one page of up to 1000).
    pub async fn maintenance_list(&self, all: bool) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1/maintenance?over={all}&limit=1000", self.base);
        self.call(self.http.get(&url), &url).await
    }

    pub async fn signal(&self, id: i64) -> Result<SignalRecordIn, ClientError> {
        let url = format!("{}/api/v1/signals/{id}", self.base);
        let v = self.call(self.http.get(&url), &url).await?;
        Self::decode(v, &url)
    }

    /// Polls a signal until it is final or `wait` has passed.
    pub async fn wait_final(
        &self,
        mut s: SignalRecordIn,
        wait: Duration,
    ) -> Result<SignalRecordIn, ClientError> {
        #[allow(clippy::disallowed_methods)] // a real-time wait of the CLI
        let deadline = std::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(5);
        #[allow(clippy::disallowed_methods)]
        while !s.is_final() && std::time::Instant::now() < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(250));
            s = self.signal(s.id).await?;
        }
        Ok(s)
    }
}
