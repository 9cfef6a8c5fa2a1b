//! `lifeline-agent`: the sidecar beside a Teleport agent. Teleport's agents
//! speak none of Lifeline's `AgentSignals`, and Teleport offers no call
//! that makes one agent re-create its tunnels; it does offer a graceful
//! restart (SIGHUP: a child with fresh tunnels takes over, open sessions
//! stay on the parent until they end). This crate holds the signal stream
//! on its host's behalf and turns a Reconnect into that restart.
//!
//! - `args`: the command line, its manual page and completions;
//! - `config`: the file and `LIFELINE_AGENT_*` variables, checked;
//! - `session`: the streams to every Lifeline replica, with backoff;
//! - `restart`: the restart and the wait for a new, ready process;
//! - `probe`: what the agent says of itself (`/readyz`, the PID file);
//! - `target`: the process a SIGHUP goes to, proven to be Teleport;
//! - `kube`: Teleport's kube agents, a StatefulSet's pods, restarted by
//!   eviction; `pods`: a session for each of them.
//!
//! Must not touch: anything of the server's. It shares only the generated
//! wire code (`lifeline-proto`).

// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod args;
pub mod clock;
pub mod config;
#[cfg(feature = "kubernetes")]
pub mod kube;
#[cfg(feature = "kubernetes")]
pub mod pods;
pub mod probe;
pub mod restart;
pub mod session;
pub mod target;

pub use config::{AgentConfig, ConfigError, FileConfig};

/// Speaks for this host until `stop`: a stream to every configured
/// address (`session`), or with `restart = "kubernetes"` one per pod of
/// the StatefulSet (`pods`).
pub async fn run(cfg: AgentConfig, stop: tokio_util::sync::CancellationToken) {
    #[cfg(feature = "kubernetes")]
    if matches!(cfg.restart, config::Restart::Kubernetes(_)) {
        if let Err(e) = pods::run(cfg, stop).await {
            tracing::warn!(error = %e, "cannot speak for the StatefulSet's pods");
        }
        return;
    }
    session::run(cfg, stop).await;
}

/// The exit code of a configuration Lifeline-agent cannot run with
/// (sysexits' EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;

/// `--check`'s look at how a restarted process will be told from the old
/// one: by `/readyz`'s PID, or by the PID file. A PID file that is there
/// but could never be trusted (a symlink, writable by others, not a PID)
/// is an error now rather than a refused restart later; one that is
/// absent is only reported (Teleport may be stopped while this runs).
pub fn check_pid_source(cfg: &AgentConfig) -> Result<String, ConfigError> {
    use target::Refusal;
    let file = match target::read_pid_file(&cfg.pid_file) {
        Ok(pid) => format!("PID file {}: PID {pid} now", cfg.pid_file.display()),
        Err(Refusal::Unreadable { error, .. }) if cfg.diag_addr.is_some() => {
            format!(
                "PID file {}: not read now ({error})",
                cfg.pid_file.display()
            )
        }
        Err(Refusal::Unreadable { error, .. }) if cfg.restart != config::Restart::Pidfile => {
            format!(
                "PID file {}: not read now ({error}); restarts are refused until it names Teleport",
                cfg.pid_file.display()
            )
        }
        Err(e @ Refusal::Unreadable { .. }) => {
            format!("{e}; restarts are refused until it names Teleport")
        }
        Err(e) => {
            return Err(ConfigError::Invalid {
                field: "pid_file",
                message: e.to_string(),
            })
        }
    };
    Ok(match &cfg.diag_addr {
        Some(d) => format!("new process told by: /readyz at {d}, else the {file}"),
        None => format!("new process told by: the {file}"),
    })
}

/// Text from outside (Lifeline, a command, Teleport), made safe to log and
/// report: control characters dropped, at most `max` characters, no
/// trailing space.
pub(crate) fn printable(s: &str, max: usize) -> String {
    let mut out: String = s.chars().filter(|c| !c.is_control()).take(max).collect();
    out.truncate(out.trim_end().len());
    out
}
