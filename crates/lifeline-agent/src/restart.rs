//! The restart: Teleport's graceful restart, as configured (`systemctl
//! reload`, SIGHUP to the PID file's process, or a command), then a wait
//! until a new process says it is ready. One at a time, never two within
//! the cooldown; a dry run only says what it would do. Owns the record of
//! the last restart; knows nothing of Lifeline's protocol.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::{info, warn};

use crate::clock;
use crate::config::{AgentConfig, Restart};
use crate::probe::{read_pid, Probe, Seen};

/// How long a restart command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is looked at while waiting.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// Longest command output kept in an error.
const MAX_OUTPUT: usize = 300;

/// What a restart came to: `ok` once the new process is ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub ok: bool,
    pub detail: String,
}

impl Outcome {
    fn failed(detail: impl Into<String>) -> Outcome {
        Outcome {
            ok: false,
            detail: detail.into(),
        }
    }
}

/// The last restart carried out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Last {
    pub at: Option<SystemTime>,
    /// How long its process took to report ready.
    pub ready_after: Option<Duration>,
}

#[derive(Default)]
struct State {
    busy: bool,
    /// When the last restart began, on the monotonic clock.
    began: Option<Instant>,
    last: Last,
}

pub struct Restarter {
    restart: Restart,
    probe: Probe,
    ready_timeout: Duration,
    cooldown: Duration,
    dry_run: bool,
    state: Mutex<State>,
    /// The last look at the agent, and when: the streams to every replica
    /// report it without each asking the agent again.
    seen: Mutex<Option<(Instant, Seen)>>,
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Restarter {
    pub fn new(cfg: &AgentConfig) -> Restarter {
        Restarter {
            restart: cfg.restart.clone(),
            probe: Probe {
                diag_addr: cfg.diag_addr.clone(),
                teleport_bin: cfg.teleport_bin.clone(),
                pid_file: cfg.pid_file.clone(),
            },
            ready_timeout: cfg.ready_timeout,
            cooldown: cfg.cooldown,
            dry_run: cfg.dry_run,
            state: Mutex::new(State::default()),
            seen: Mutex::new(None),
        }
    }

    /// How this sidecar restarts its agent, in words.
    pub fn method(&self) -> String {
        self.restart.to_string()
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    pub fn last(&self) -> Last {
        lock(&self.state).last
    }

    /// What the agent says of itself now.
    pub async fn look(&self) -> Seen {
        let seen = self.probe.look().await;
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((clock::instant(), seen.clone()));
        seen
    }

    /// What the agent said within `max_age`, or a fresh look.
    pub async fn recent_look(&self, max_age: Duration) -> Seen {
        let cached = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match cached {
            Some((at, seen)) if at.elapsed() < max_age => seen,
            _ => self.look().await,
        }
    }

    /// Restarts the agent and waits until a new process is ready.
    pub async fn restart(&self, why: &str) -> Outcome {
        {
            let mut st = lock(&self.state);
            if st.busy {
                return Outcome::failed("a restart is already in progress");
            }
            if let Some(began) = st.began {
                let since = began.elapsed();
                if since < self.cooldown {
                    return Outcome::failed(format!(
                        "cooling down: restarted {} ago, the next may go in {} (cooldown)",
                        humantime::format_duration(secs(since)),
                        humantime::format_duration(secs(self.cooldown - since)),
                    ));
                }
            }
            if self.dry_run {
                return Outcome::failed(format!(
                    "dry run: would restart the agent ({}) because {why}",
                    self.restart
                ));
            }
            st.busy = true;
            st.began = Some(clock::instant());
        }
        let outcome = self.carry_out(why).await;
        let mut st = lock(&self.state);
        st.busy = false;
        outcome
    }

    async fn carry_out(&self, why: &str) -> Outcome {
        let before = self.look().await.pid;
        let began = clock::instant();
        let at = clock::wall();
        info!(method = %self.restart, why, old_pid = ?before, "restarting the agent");
        if let Err(e) = self.run().await {
            warn!(method = %self.restart, error = %e, "the restart failed");
            return Outcome::failed(format!("restart ({}) failed: {e}", self.restart));
        }
        lock(&self.state).last = Last {
            at: Some(at),
            ready_after: None,
        };
        let deadline = began + self.ready_timeout;
        let said = loop {
            let seen = self.look().await;
            let new_process = match (before, seen.pid) {
                (Some(b), Some(now)) => now != b,
                // Without a PID before, readiness after the restart is
                // all there is to go by.
                (None, _) => true,
                (Some(_), None) => false,
            };
            if seen.ready && new_process {
                let took = began.elapsed();
                lock(&self.state).last.ready_after = Some(took);
                info!(pid = ?seen.pid, ready_after = ?took, "the restarted agent is ready");
                return Outcome {
                    ok: true,
                    detail: format!(
                        "restarted ({}): pid {} → {}, ready after {:.1} s",
                        self.restart,
                        before.map_or_else(|| "?".into(), |p| p.to_string()),
                        seen.pid.map_or_else(|| "?".into(), |p| p.to_string()),
                        took.as_secs_f64()
                    ),
                };
            }
            if clock::instant() >= deadline {
                break seen.status;
            }
            tokio::time::sleep(LOOK_EVERY).await;
        };
        warn!(timeout = ?self.ready_timeout, last = %said, "the restarted agent did not turn ready");
        Outcome::failed(format!(
            "restarted ({}), but no new process was ready within {} (last said: {said})",
            self.restart,
            humantime::format_duration(self.ready_timeout)
        ))
    }

    /// Asks for the restart.
    async fn run(&self) -> Result<(), String> {
        match &self.restart {
            Restart::Systemd { unit, systemctl } => {
                command(&[&systemctl.to_string_lossy(), "reload", unit]).await
            }
            Restart::Exec { argv } => {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                command(&argv).await
            }
            Restart::Pidfile => {
                let path = &self.probe.pid_file;
                let pid = read_pid(path)
                    .await
                    .ok_or_else(|| format!("no PID in {}", path.display()))?;
                let target = rustix::process::Pid::from_raw(pid as i32)
                    .ok_or_else(|| format!("{pid} is not a process ID"))?;
                rustix::process::kill_process(target, rustix::process::Signal::HUP)
                    .map_err(|e| format!("cannot send SIGHUP to {pid}: {e}"))
            }
        }
    }
}

/// Whole seconds, for messages.
fn secs(d: Duration) -> Duration {
    Duration::from_secs(d.as_secs())
}

/// Runs a command; its failure says how, with the start of its output.
async fn command(argv: &[&str]) -> Result<(), String> {
    let Some((bin, args)) = argv.split_first() else {
        return Err("no command".into());
    };
    let run = tokio::process::Command::new(bin)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(COMMAND_TIMEOUT, run)
        .await
        .map_err(|_| {
            format!(
                "`{}` did not finish within {COMMAND_TIMEOUT:?}",
                argv.join(" ")
            )
        })?
        .map_err(|e| format!("cannot run `{}`: {e}", argv.join(" ")))?;
    if out.status.success() {
        return Ok(());
    }
    let said = crate::printable(&String::from_utf8_lossy(&out.stderr), MAX_OUTPUT);
    Err(format!(
        "`{}` exited with {}: {said}",
        argv.join(" "),
        out.status
    ))
}
