//! The restart: Teleport's graceful restart, as configured (`systemctl
//! reload`, SIGHUP to the PID file's process, or a command), then a wait
//! until a new process says it is ready. One at a time, never two within
//! the cooldown; a dry run only says what it would do. Done needs evidence:
//! a PID before the restart and a different PID ready after it. What is
//! not tried is `refused` (a dry run, the cooldown, a restart under way, a
//! target that cannot be proven to be Teleport), never `failed`. Owns the
//! record of the last restart; knows nothing of Lifeline's protocol.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::{info, warn};

use crate::clock;
use crate::config::{AgentConfig, Restart};
#[cfg(feature = "kubernetes")]
use crate::kube::{Evicted, PodTarget};
use crate::probe::{Probe, Seen};
use crate::target::{self, Target, Wanted};

/// How long a restart command may run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is looked at while waiting.
const LOOK_EVERY: Duration = Duration::from_millis(250);
/// Longest command output kept in an error.
const MAX_OUTPUT: usize = 300;

/// How a restart ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new process turned ready.
    Ready,
    /// Tried, and no new process turned ready (or the restart itself
    /// failed).
    Failed,
    /// Not tried, and why is in the detail.
    Refused,
}

/// What a restart came to, in words for the ack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub verdict: Verdict,
    pub detail: String,
}

impl Outcome {
    fn failed(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::Failed,
            detail: detail.into(),
        }
    }

    fn refused(detail: impl Into<String>) -> Outcome {
        Outcome {
            verdict: Verdict::Refused,
            detail: detail.into(),
        }
    }

    /// A new process turned ready.
    pub fn ok(&self) -> bool {
        self.verdict == Verdict::Ready
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

/// What a restart takes beyond its wait for the agent: the restart
/// command or the eviction, and the ack's way to Lifeline.
pub const ACK_MARGIN: Duration = Duration::from_secs(30);

pub struct Restarter {
    restart: Restart,
    probe: Probe,
    wanted: Wanted,
    ready_timeout: Duration,
    cooldown: Duration,
    dry_run: bool,
    /// `restart = "kubernetes"`: the pod this restarter evicts.
    #[cfg(feature = "kubernetes")]
    pod: Option<PodTarget>,
    state: Mutex<State>,
    /// The last look at the agent, and when: the streams to every replica
    /// report it without each asking the agent again.
    seen: Mutex<Option<(Instant, Seen)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A restart under way: `busy` until this is dropped.
struct Busy<'a>(&'a Mutex<State>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        lock(self.0).busy = false;
    }
}

/// What a restart is about to act on: the PID before it, and for SIGHUP
/// the process proven to be Teleport.
struct Before {
    pid: i32,
    target: Option<Target>,
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
            wanted: Wanted::from_config(&cfg.teleport_bin),
            ready_timeout: cfg.ready_timeout,
            cooldown: cfg.cooldown,
            dry_run: cfg.dry_run,
            #[cfg(feature = "kubernetes")]
            pod: None,
            state: Mutex::new(State::default()),
            seen: Mutex::new(None),
        }
    }

    /// The restarter of one kube agent pod: eviction, with the same
    /// one-at-a-time, cooldown and dry run as the other methods.
    #[cfg(feature = "kubernetes")]
    pub fn for_pod(cfg: &AgentConfig, pod: PodTarget) -> Restarter {
        Restarter {
            pod: Some(pod),
            ..Restarter::new(cfg)
        }
    }

    /// How this sidecar restarts its agent, in words.
    pub fn method(&self) -> String {
        #[cfg(feature = "kubernetes")]
        if let Some(p) = &self.pod {
            return p.method();
        }
        self.restart.to_string()
    }

    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// The longest a restart of this sidecar's may take before its ack,
    /// as Lifeline is told at the stream's start: the wait for the
    /// restarted agent (`ready_timeout`; for an eviction, the drain and
    /// the replacement's readiness both fall in it) and a margin for the
    /// restart itself and the ack's way back.
    pub fn ack_within(&self) -> Duration {
        self.ready_timeout.saturating_add(ACK_MARGIN)
    }

    pub fn last(&self) -> Last {
        lock(&self.state).last
    }

    /// What the agent says of itself now.
    pub async fn look(&self) -> Seen {
        #[cfg(feature = "kubernetes")]
        let seen = match &self.pod {
            Some(p) => p.look().await,
            None => self.probe.look().await,
        };
        #[cfg(not(feature = "kubernetes"))]
        let seen = self.probe.look().await;
        *lock(&self.seen) = Some((clock::instant(), seen.clone()));
        seen
    }

    /// What the agent said within `max_age`, or a fresh look.
    pub async fn recent_look(&self, max_age: Duration) -> Seen {
        let cached = lock(&self.seen).clone();
        match cached {
            Some((at, seen)) if clock::since(at) < max_age => seen,
            _ => self.look().await,
        }
    }

    /// Restarts the agent and waits until a new process is ready.
    pub async fn restart(&self, why: &str) -> Outcome {
        // Held from here to the end, however it ends (a refusal, a
        // failure, the task dropped): two asks cannot both pass.
        let _busy = {
            let mut st = lock(&self.state);
            if st.busy {
                return Outcome::refused("a restart is already in progress");
            }
            if let Some(began) = st.began {
                let since = clock::since(began);
                if since < self.cooldown {
                    return Outcome::refused(format!(
                        "cooling down: restarted {} ago, the next may go in {} (cooldown)",
                        humantime::format_duration(secs(since)),
                        humantime::format_duration(secs(self.cooldown - since)),
                    ));
                }
            }
            st.busy = true;
            Busy(&self.state)
        };
        #[cfg(feature = "kubernetes")]
        if let Some(pod) = &self.pod {
            return self.evict(pod, why).await;
        }
        let before = match self.before().await {
            Ok(b) => b,
            Err(why_not) => {
                warn!(reason = %why_not, "restart refused");
                return Outcome::refused(why_not);
            }
        };
        if self.dry_run {
            return Outcome::refused(format!(
                "dry run: would restart the agent ({}, PID {}) because {why}",
                self.restart, before.pid
            ));
        }
        lock(&self.state).began = Some(clock::instant());
        self.carry_out(why, before).await
    }

    /// Evicts the pod, then waits for the StatefulSet's replacement to be
    /// Ready with a new container. A PodDisruptionBudget's 429, a pod
    /// replaced or gone, or one that no longer runs this agent, is
    /// refused: nothing was evicted.
    #[cfg(feature = "kubernetes")]
    async fn evict(&self, pod: &PodTarget, why: &str) -> Outcome {
        let old = match pod.before().await {
            Ok(i) => i,
            Err(why_not) => {
                warn!(reason = %why_not, "restart refused");
                return Outcome::refused(why_not);
            }
        };
        if self.dry_run {
            return Outcome::refused(format!(
                "dry run: would {} ({old}) because {why}",
                pod.method()
            ));
        }
        let began = clock::instant();
        let at = clock::wall();
        info!(pod = %old, why, "evicting the agent's pod");
        match pod.evict(&old).await {
            Ok(()) => {}
            Err(Evicted::Refused(r)) => {
                warn!(reason = %r, "eviction refused; nothing was evicted");
                return Outcome::refused(r);
            }
            Err(Evicted::Failed(f)) => {
                // Perhaps evicted after all: no second try within the
                // cooldown.
                lock(&self.state).began = Some(began);
                warn!(error = %f, "the eviction failed");
                return Outcome::failed(f);
            }
        }
        {
            let mut st = lock(&self.state);
            st.began = Some(began);
            st.last = Last {
                at: Some(at),
                ready_after: None,
            };
        }
        match pod.replaced(&old, began + self.ready_timeout).await {
            Ok((new, seen)) => {
                let took = clock::since(began);
                lock(&self.state).last.ready_after = Some(took);
                info!(old = %old, new = %new, ready_after = ?took, "the replacement pod is ready");
                let pid = seen
                    .pid
                    .map(|p| format!(", /readyz pid {p}"))
                    .unwrap_or_default();
                Outcome {
                    verdict: Verdict::Ready,
                    detail: format!(
                        "evicted {old} → {new} Ready{pid}, after {:.1} s",
                        took.as_secs_f64()
                    ),
                }
            }
            Err(last) => {
                warn!(timeout = ?self.ready_timeout, last = %last, "no replacement pod turned ready");
                Outcome::failed(format!(
                    "evicted {old}, but no replacement was Ready with a new container within {} (last seen: {last})",
                    humantime::format_duration(self.ready_timeout)
                ))
            }
        }
    }

    /// The PID before the restart, proven where Lifeline signals it itself;
    /// an error is why nothing may be tried.
    async fn before(&self) -> Result<Before, String> {
        let seen = self.look().await;
        match &self.restart {
            Restart::Pidfile => {
                let pid = target::read_pid_file(&self.probe.pid_file).map_err(|e| e.to_string())?;
                let t =
                    target::prove(pid, &self.wanted, seen.readyz_pid).map_err(|e| e.to_string())?;
                Ok(Before {
                    pid: t.pid,
                    target: Some(t),
                })
            }
            Restart::Kubernetes(_) => Err("not evicting: this restarter has no pod".into()),
            Restart::Systemd { .. } | Restart::Exec { .. } => {
                let pid = seen.pid.and_then(|p| i32::try_from(p).ok()).ok_or_else(|| {
                    format!(
                        "not restarting: no PID for Teleport now (its /readyz and the PID file name none: {}), so a new process could not be told from the old",
                        seen.status
                    )
                })?;
                Ok(Before { pid, target: None })
            }
        }
    }

    async fn carry_out(&self, why: &str, before: Before) -> Outcome {
        let began = clock::instant();
        let at = clock::wall();
        info!(method = %self.restart, why, old_pid = before.pid, "restarting the agent");
        if let Err(e) = self.run(before.target.as_ref()).await {
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
            // Evidence of a new process: a PID, not the one before.
            let new_pid = seen.pid.filter(|p| i64::from(*p) != i64::from(before.pid));
            if let (true, Some(now)) = (seen.ready, new_pid) {
                let took = clock::since(began);
                lock(&self.state).last.ready_after = Some(took);
                info!(pid = now, ready_after = ?took, "the restarted agent is ready");
                return Outcome {
                    verdict: Verdict::Ready,
                    detail: format!(
                        "restarted ({}): pid {} → {now}, ready after {:.1} s",
                        self.restart,
                        before.pid,
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
    async fn run(&self, target: Option<&Target>) -> Result<(), String> {
        match &self.restart {
            Restart::Systemd { unit, systemctl } => {
                command(&[&systemctl.to_string_lossy(), "reload", unit]).await
            }
            Restart::Exec { argv } => {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                command(&argv).await
            }
            Restart::Pidfile => match target {
                Some(t) => t.hang_up(),
                None => Err("no proven process to signal".into()),
            },
            Restart::Kubernetes(_) => Err("a pod is evicted, never signalled".into()),
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
