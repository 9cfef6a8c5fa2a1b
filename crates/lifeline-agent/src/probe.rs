//! Reads the agent's own account of itself: Teleport's diagnostic
//! `/readyz` (`{status, pid}`; 200 ready, 400 starting or recovering, 503
//! degraded), or `teleport debug readyz` where no diagnostic address is
//! set, and the PID file. Reads only; never acts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// How long one look may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest `/readyz` body read.
const MAX_BODY: usize = 64 * 1024;
/// Longest status kept.
const MAX_STATUS: usize = 200;

/// What one look found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The agent says it is ready.
    pub ready: bool,
    /// Its words (`ok`, `starting`, ...) or why it could not be read.
    pub status: String,
    /// Its process, from `/readyz` or the PID file.
    pub pid: Option<u32>,
    /// The PID `/readyz` itself named, if it named one.
    pub readyz_pid: Option<u32>,
}

#[derive(Clone, Debug)]
pub struct Probe {
    pub diag_addr: Option<String>,
    pub teleport_bin: PathBuf,
    pub pid_file: PathBuf,
}

fn clean(s: &str) -> String {
    crate::printable(s, MAX_STATUS)
}

/// The PID a PID file holds, if it holds one that may be a PID (read as
/// [`crate::target::read_pid_file`] reads it: bounded, no symlinks).
pub async fn read_pid(path: &Path) -> Option<u32> {
    let path = path.to_path_buf();
    let pid = tokio::task::spawn_blocking(move || crate::target::read_pid_file(&path).ok())
        .await
        .ok()
        .flatten()?;
    u32::try_from(pid).ok()
}

impl Probe {
    pub async fn look(&self) -> Seen {
        let mut seen = match &self.diag_addr {
            Some(addr) => readyz_at(addr).await,
            None => self.debug_readyz().await,
        };
        seen.readyz_pid = seen.pid;
        if seen.pid.is_none() && !self.pid_file.as_os_str().is_empty() {
            seen.pid = read_pid(&self.pid_file).await;
        }
        seen
    }

    /// `teleport debug readyz`: exit status 0 is ready.
    async fn debug_readyz(&self) -> Seen {
        let run = tokio::process::Command::new(&self.teleport_bin)
            .args(["debug", "readyz"])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(LOOK_TIMEOUT, run).await {
            Ok(Ok(out)) => {
                let text = String::from_utf8_lossy(&out.stdout);
                let words = clean(text.lines().next().unwrap_or_default());
                Seen {
                    ready: out.status.success(),
                    status: if words.is_empty() {
                        format!("teleport debug readyz: {}", out.status)
                    } else {
                        words
                    },
                    pid: None,
                    readyz_pid: None,
                }
            }
            Ok(Err(e)) => Seen {
                ready: false,
                status: clean(&format!(
                    "cannot run {} debug readyz: {e}",
                    self.teleport_bin.display()
                )),
                pid: None,
                readyz_pid: None,
            },
            Err(_) => Seen {
                ready: false,
                status: format!("teleport debug readyz did not answer within {LOOK_TIMEOUT:?}"),
                pid: None,
                readyz_pid: None,
            },
        }
    }
}

/// Teleport's `/readyz` at `addr` (a kube agent pod's diagnostic
/// address), bounded as [`Probe::look`] is.
pub async fn readyz_at(addr: &str) -> Seen {
    match tokio::time::timeout(LOOK_TIMEOUT, readyz(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => Seen {
            ready: false,
            status: clean(&format!("diag {addr} unreachable: {e}")),
            pid: None,
            readyz_pid: None,
        },
        Err(_) => Seen {
            ready: false,
            status: format!("diag {addr} did not answer within {LOOK_TIMEOUT:?}"),
            pid: None,
            readyz_pid: None,
        },
    }
}

#[derive(Debug, thiserror::Error)]
enum ReadyzError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("{0}")]
    Request(#[from] hyper::http::Error),
    #[error("body: {0}")]
    Body(String),
}

/// GET `/readyz` on Teleport's diagnostic address.
async fn readyz(addr: &str) -> Result<Seen, ReadyzError> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn);
    let req = hyper::Request::get("/readyz")
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())?;
    let resp = send.send_request(req).await?;
    let code = resp.status();
    let body = Limited::new(resp.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| ReadyzError::Body(e.to_string()))?
        .to_bytes();
    driver.abort();
    #[derive(serde::Deserialize)]
    struct Readyz {
        #[serde(default)]
        status: String,
        #[serde(default)]
        pid: Option<u32>,
    }
    let parsed: Option<Readyz> = serde_json::from_slice(&body).ok();
    let (status, pid) = match parsed {
        Some(r) => (
            clean(&r.status),
            r.pid
                .filter(|p| *p > 1 && i64::from(*p) < crate::target::pid_max()),
        ),
        None => (clean(&String::from_utf8_lossy(&body)), None),
    };
    Ok(Seen {
        ready: code == hyper::StatusCode::OK,
        status: if status.is_empty() {
            format!("HTTP {}", code.as_u16())
        } else {
            status
        },
        pid,
        readyz_pid: pid,
    })
}
