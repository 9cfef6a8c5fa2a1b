//! The processes of `bench failover`: each replica a `lifeline serve` of
//! its own, reaching the database through a relay here that can be cut.

// Benchmarks measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::other;
use crate::{BenchError, Scratch, BENCH_TOKEN};
use lifeline::config::DbUrl;
use lifeline_sim::SimCluster;

/// A TCP relay to the database that can be cut: from then on it forwards
/// nothing either way and accepts connections only to hold them.
struct DbRelay {
    addr: SocketAddr,
    cut: CancellationToken,
    stop: CancellationToken,
}

impl DbRelay {
    async fn start(target: SocketAddr) -> Result<DbRelay, BenchError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| other(format!("database relay: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| other(format!("database relay: {e}")))?;
        let (cut, stop) = (CancellationToken::new(), CancellationToken::new());
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (c, s) = (cut.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    _ = s.cancelled() => break,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = conn else { continue };
                let (c, s, held) = (c.clone(), s.clone(), held.clone());
                tokio::spawn(relay(client, target, c, s, held));
            }
        });
        Ok(DbRelay { addr, cut, stop })
    }
}

impl Drop for DbRelay {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn relay(
    mut client: TcpStream,
    target: SocketAddr,
    cut: CancellationToken,
    stop: CancellationToken,
    held: Arc<Mutex<Vec<TcpStream>>>,
) {
    let hold = |s: TcpStream| held.lock().unwrap_or_else(|p| p.into_inner()).push(s);
    if cut.is_cancelled() {
        return hold(client);
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let _ = client.set_nodelay(true);
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
        _ = cut.cancelled() => {
            // Neither end hears anything again, nor is told it is over.
            hold(client);
            hold(server);
        }
        _ = stop.cancelled() => {}
    }
}

/// One `lifeline serve` process.
pub(super) struct Replica {
    pub(super) name: String,
    pub(super) http: SocketAddr,
    pub(super) grpc: SocketAddr,
    pub(super) proc: tokio::process::Child,
    db: DbRelay,
    log: PathBuf,
}

/// A free loopback port (bound and released: another process could take
/// it in between, which on a quiet machine it does not).
fn free_port() -> Result<SocketAddr, BenchError> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map_err(|e| other(format!("no free port: {e}")))
}

pub(super) struct Setup<'a> {
    pub(super) scratch: &'a Scratch,
    pub(super) sim: &'a SimCluster,
    pub(super) db: &'a DbUrl,
    pub(super) db_addr: SocketAddr,
    pub(super) lease: Duration,
}

impl Replica {
    pub(super) async fn spawn(name: &str, s: &Setup<'_>) -> Result<Replica, BenchError> {
        let (http, grpc) = (free_port()?, free_port()?);
        let relay = DbRelay::start(s.db_addr).await?;
        let mut url = url::Url::parse(s.db.expose())
            .map_err(|_| BenchError::Unavailable("--postgres is not a postgres:// URL"))?;
        url.set_host(Some("127.0.0.1"))
            .and_then(|_| {
                url.set_port(Some(relay.addr.port()))
                    .map_err(|_| url::ParseError::InvalidPort)
            })
            .map_err(|_| BenchError::Unavailable("--postgres cannot be given a host and port"))?;
        let hash = lifeline::access::hash_hex;
        let toml = format!(
            r#"[server]
listen = "{http}"
grpc_listen = "{grpc}"

[cluster]
addr = "{cluster}"
page_size = 5000

[storage]
url = "{url}"
replica = "{name}"
leader_lease = "{lease}ms"

[signals]
ack_timeout = "2s"

[access]
join_tokens = ["{join}"]
manual_reconnect_interval = "1ms"

[[access.tokens]]
name = "bench"
sha256 = "{token}"
roles = ["read", "update"]
"#,
            cluster = s.sim.uri(),
            lease = s.lease.as_millis(),
            join = hash(&s.sim.spec().join_token),
            token = hash(BENCH_TOKEN),
        );
        let config = s.scratch.db(&format!("{name}.toml"));
        let log = s.scratch.db(&format!("{name}.log"));
        std::fs::write(&config, toml).map_err(|e| other(format!("{name}: config: {e}")))?;
        let stderr = std::fs::File::create(&log).map_err(|e| other(format!("{name}: log: {e}")))?;
        let exe = crate::lifeline_exe().map_err(other)?;
        let mut cmd = tokio::process::Command::new(exe);
        // Only the file configures it, not whatever this shell exports.
        for (k, _) in std::env::vars_os() {
            if k.to_str()
                .is_some_and(|k| k.starts_with("LIFELINE_") || k.starts_with("OTEL_"))
            {
                cmd.env_remove(k);
            }
        }
        let proc = cmd
            .arg("serve")
            .env("LIFELINE_CONFIG", &config)
            .env("LIFELINE_LOG", "warn,lifeline::replica=info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| other(format!("cannot start `lifeline serve` ({name}): {e}")))?;
        Ok(Replica {
            name: name.to_string(),
            http,
            grpc,
            proc,
            db: relay,
            log,
        })
    }

    /// Its database relay goes dark from now on.
    pub(super) fn cut_off_database(&self) {
        self.db.cut.cancel();
    }

    /// The end of its log, for an error that names it.
    pub(super) fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    pub(super) fn failed(&self, what: &str) -> BenchError {
        BenchError::Agents(format!(
            "replica {}: {what}; its log ends:\n{}",
            self.name,
            self.log_tail()
        ))
    }

    pub(super) async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        limit: Duration,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.proc.try_wait() {
                return Err(self.failed(&format!("exited ({status})")));
            }
            let ok = http
                .get(format!("http://{}/readyz", self.http))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.failed("not ready"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its summary (from its own memory).
    pub(super) async fn summary(&self, http: &reqwest::Client) -> Option<Value> {
        http.get(format!("http://{}/api/v1/summary", self.http))
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()
    }

    /// Whether it says it leads.
    pub(super) async fn says_it_leads(&self, http: &reqwest::Client) -> Option<bool> {
        self.summary(http).await?["leadership"]["leading"].as_bool()
    }
}
