//! The process a restart signals, proven to be Teleport before anything is
//! sent to it. A PID file is hostile input: it may be stale (Teleport
//! crashed and its PID went to another process), hold a number that is no
//! PID (`4294967295` is `-1` to `kill`, "every process"), be a symlink, be
//! huge, or be writable by someone who wants a process of their choice
//! hung up. So the PID is parsed as a positive `i32` below the kernel's
//! `pid_max`; the process is pinned with a pidfd first, then its
//! `/proc/<pid>/exe` must be the Teleport binary and, where Teleport's
//! `/readyz` names its PID, the two must agree; the signal goes through
//! the pidfd, so a PID reused after the check cannot be hit.
//!
//! Owns the proof and the one signal; never decides whether to restart.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, PidfdFlags, Signal};

/// Largest PID file read: a PID and a newline are a dozen bytes.
pub const MAX_PID_FILE: u64 = 64;
/// `pid_max` when the kernel's own cannot be read (its largest value).
const PID_MAX_LIMIT: i64 = 4_194_304;
/// What Linux adds to `/proc/<pid>/exe` when the binary was replaced since
/// the process started (a package upgrade before the graceful restart that
/// takes it up: exactly when a restart is wanted).
const DELETED: &str = " (deleted)";

/// Why a process was not signalled. Each says what was found, for the ack
/// an operator reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("cannot read the PID file {path}: {error}")]
    Unreadable { path: PathBuf, error: String },
    #[error("the PID file {0} is a symlink; it must be a file")]
    Symlink(PathBuf),
    #[error("the PID file {0} is not a regular file")]
    NotAFile(PathBuf),
    #[error("the PID file {path} can be written by group or others (mode {mode:o}); it must not")]
    Writable { path: PathBuf, mode: u32 },
    #[error("the PID file {path} holds {size} bytes, more than a PID ({MAX_PID_FILE} at most)")]
    TooBig { path: PathBuf, size: u64 },
    #[error("the PID file {path} holds {text:?}, not a process ID")]
    NotAPid { path: PathBuf, text: String },
    #[error("PID {pid} is out of range: a process ID is 2 to {}", .pid_max - 1)]
    OutOfRange { pid: i64, pid_max: i64 },
    #[error("PID {0} has exited: the PID file is stale")]
    Exited(i32),
    #[error("cannot tell what PID {pid} is: {error}")]
    Unknown { pid: i32, error: String },
    #[error("not restarting: PID {pid} is {exe}, not {wanted}")]
    NotTeleport {
        pid: i32,
        exe: String,
        wanted: String,
    },
    #[error(
        "not restarting: the PID file names {file} but Teleport's /readyz says it is {readyz}"
    )]
    Disagree { file: i32, readyz: u32 },
}

/// Which executable counts as Teleport: a bare name (`teleport`, the
/// default) matches any executable of that name; a path matches that file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    Named(String),
    Path(PathBuf),
}

impl Wanted {
    pub fn from_config(teleport_bin: &Path) -> Wanted {
        if teleport_bin.components().count() > 1 || teleport_bin.is_absolute() {
            // A path that cannot be resolved now is compared as written.
            Wanted::Path(std::fs::canonicalize(teleport_bin).unwrap_or(teleport_bin.into()))
        } else {
            Wanted::Named(teleport_bin.to_string_lossy().into_owned())
        }
    }

    /// Whether `exe` (as `/proc/<pid>/exe` reads) is this binary.
    pub fn matches(&self, exe: &Path) -> bool {
        let text = exe.to_string_lossy();
        let exe = Path::new(text.strip_suffix(DELETED).unwrap_or(&text));
        match self {
            Wanted::Named(name) => exe.file_name().is_some_and(|f| f == name.as_str()),
            Wanted::Path(p) => exe == p,
        }
    }
}

impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wanted::Named(n) => write!(f, "{n}"),
            Wanted::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The kernel's `pid_max`: every PID is below it.
pub fn pid_max() -> i64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|m| *m > 2)
        .unwrap_or(PID_MAX_LIMIT)
}

/// Parses a PID as text from outside: digits only (surrounding whitespace
/// allowed), 2 ≤ pid < `pid_max`. PID 1 is init: never Teleport's to
/// restart from here.
pub fn parse_pid(path: &Path, text: &str) -> Result<i32, Refusal> {
    let t = text.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) || t.len() > 19 {
        return Err(Refusal::NotAPid {
            path: path.into(),
            text: crate::printable(t, 40),
        });
    }
    let pid_max = pid_max();
    let n: i64 = t.parse().map_err(|_| Refusal::NotAPid {
        path: path.into(),
        text: crate::printable(t, 40),
    })?;
    if n < 2 || n >= pid_max {
        return Err(Refusal::OutOfRange { pid: n, pid_max });
    }
    i32::try_from(n).map_err(|_| Refusal::OutOfRange { pid: n, pid_max })
}

/// Reads a PID file: not through a symlink, not one that group or others
/// may write, at most [`MAX_PID_FILE`] bytes.
pub fn read_pid_file(path: &Path) -> Result<i32, Refusal> {
    let unreadable = |e: std::io::Error| Refusal::Unreadable {
        path: path.into(),
        error: e.to_string(),
    };
    let fd: OwnedFd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(Refusal::Symlink(path.into())),
        Err(e) => return Err(unreadable(e.into())),
    };
    let mut file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.file_type().is_file() {
        return Err(Refusal::NotAFile(path.into()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refusal::Writable {
            path: path.into(),
            mode: meta.mode() & 0o7777,
        });
    }
    if meta.len() > MAX_PID_FILE {
        return Err(Refusal::TooBig {
            path: path.into(),
            size: meta.len(),
        });
    }
    let mut buf = Vec::with_capacity(MAX_PID_FILE as usize + 1);
    (&mut file)
        .take(MAX_PID_FILE + 1)
        .read_to_end(&mut buf)
        .map_err(unreadable)?;
    if buf.len() as u64 > MAX_PID_FILE {
        return Err(Refusal::TooBig {
            path: path.into(),
            size: buf.len() as u64,
        });
    }
    parse_pid(path, &String::from_utf8_lossy(&buf))
}

/// A process proven to be Teleport, pinned by its pidfd.
#[derive(Debug)]
pub struct Target {
    pub pid: i32,
    pub exe: PathBuf,
    pidfd: OwnedFd,
}

/// Pins `pid` and proves it is `wanted`; `readyz_pid` is what Teleport's
/// own `/readyz` says its PID is, when it said.
pub fn prove(pid: i32, wanted: &Wanted, readyz_pid: Option<u32>) -> Result<Target, Refusal> {
    if let Some(r) = readyz_pid {
        if i64::from(r) != i64::from(pid) {
            return Err(Refusal::Disagree {
                file: pid,
                readyz: r,
            });
        }
    }
    let raw = Pid::from_raw(pid).ok_or(Refusal::OutOfRange {
        pid: i64::from(pid),
        pid_max: pid_max(),
    })?;
    // Pinned first: whatever is checked below is this process, or the
    // signal through the pidfd fails because it has gone.
    let pidfd = match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Err(Refusal::Exited(pid)),
        Err(e) => {
            return Err(Refusal::Unknown {
                pid,
                error: format!("pidfd_open: {e}"),
            })
        }
    };
    let exe = match std::fs::read_link(format!("/proc/{pid}/exe")) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Refusal::Exited(pid)),
        Err(e) => {
            return Err(Refusal::Unknown {
                pid,
                error: exe_error(pid, &e),
            })
        }
    };
    if !wanted.matches(&exe) {
        return Err(Refusal::NotTeleport {
            pid,
            exe: crate::printable(&exe.to_string_lossy(), 200),
            wanted: wanted.to_string(),
        });
    }
    Ok(Target { pid, exe, pidfd })
}

impl Target {
    /// SIGHUP, Teleport's graceful restart, to the pinned process only.
    pub fn hang_up(&self) -> Result<(), String> {
        rustix::process::pidfd_send_signal(&self.pidfd, Signal::HUP)
            .map_err(|e| signal_error(self.pid, e))
    }
}

/// The capabilities `restart = "pidfile"` needs to act on a Teleport
/// running as another user (root), and nothing more: the unit's drop-in
/// names exactly these.
pub const PIDFILE_CAPABILITIES: [&str; 2] = ["CAP_KILL", "CAP_SYS_PTRACE"];

/// Why the target's executable could not be read, naming what would let
/// it be.
fn exe_error(pid: i32, e: &std::io::Error) -> String {
    format!(
        "cannot read /proc/{pid}/exe ({e}): the sidecar must run as Teleport's user or with CAP_SYS_PTRACE to prove its target"
    )
}

/// Why a SIGHUP could not be sent, naming what would let it.
fn signal_error(pid: i32, e: rustix::io::Errno) -> String {
    match e {
        rustix::io::Errno::SRCH => format!("PID {pid} exited before it was signalled"),
        rustix::io::Errno::PERM => format!(
            "cannot send SIGHUP to PID {pid}: not permitted; the sidecar must run as Teleport's user or with CAP_KILL"
        ),
        e => format!("cannot send SIGHUP to PID {pid}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// pidfile mode needs exactly CAP_KILL (the signal) and CAP_SYS_PTRACE
    /// (reading another user's /proc/<pid>/exe to prove the target): the
    /// packaged unit's drop-in grants exactly those, and each refusal for
    /// want of one names it.
    #[test]
    fn pidfile_needs_exactly_cap_kill_and_cap_sys_ptrace_and_says_which() {
        let unit = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../deploy/lifeline-agent.service"),
        )
        .unwrap();
        for key in ["CapabilityBoundingSet=", "AmbientCapabilities="] {
            let granted: Vec<&str> = unit
                .lines()
                .filter_map(|l| l.trim_start_matches('#').trim().strip_prefix(key))
                .filter(|v| !v.is_empty())
                .flat_map(str::split_whitespace)
                .collect();
            assert_eq!(granted, PIDFILE_CAPABILITIES, "{key} in the drop-in");
        }
        let e = signal_error(42, rustix::io::Errno::PERM);
        assert!(e.contains("CAP_KILL"), "{e}");
        assert!(signal_error(42, rustix::io::Errno::SRCH).contains("exited"));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = exe_error(42, &denied);
        assert!(
            e.contains("CAP_SYS_PTRACE") && e.contains("/proc/42/exe"),
            "{e}"
        );
        // Each capability the drop-in grants is one a refusal names.
        for cap in PIDFILE_CAPABILITIES {
            assert!(
                [
                    signal_error(42, rustix::io::Errno::PERM),
                    exe_error(42, &denied)
                ]
                .iter()
                .any(|m| m.contains(cap)),
                "{cap} is named by no refusal"
            );
        }
    }
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, name: &str, body: &[u8], mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_pid_is_a_positive_number_below_pid_max() {
        let p = Path::new("/run/t.pid");
        for bad in [
            "-1",
            "4294967295",
            "0",
            "1",
            "",
            "abc",
            "12ab",
            "+5",
            "1e3",
            "99999999999999999999999",
        ] {
            assert!(parse_pid(p, bad).is_err(), "{bad:?} was taken");
        }
        assert_eq!(parse_pid(p, " 4242\n"), Ok(4242));
        assert!(matches!(
            parse_pid(p, "4294967295"),
            Err(Refusal::OutOfRange {
                pid: 4294967295,
                ..
            })
        ));
        let max = pid_max();
        assert!(parse_pid(p, &max.to_string()).is_err());
        assert_eq!(
            parse_pid(p, &(max - 1).to_string()).ok(),
            i32::try_from(max - 1).ok()
        );
    }

    #[test]
    fn a_pid_file_is_read_safely() {
        let d = tempfile::tempdir().unwrap();
        let ok = file(d.path(), "ok.pid", b"4242\n", 0o644);
        assert_eq!(read_pid_file(&ok), Ok(4242));
        let huge = file(d.path(), "huge.pid", &vec![b'1'; 1 << 20], 0o644);
        assert!(matches!(read_pid_file(&huge), Err(Refusal::TooBig { .. })));
        let garbage = file(d.path(), "g.pid", b"\x00\xff\x1b[2J", 0o644);
        assert!(matches!(
            read_pid_file(&garbage),
            Err(Refusal::NotAPid { .. })
        ));
        let world = file(d.path(), "w.pid", b"4242\n", 0o666);
        assert!(matches!(
            read_pid_file(&world),
            Err(Refusal::Writable { .. })
        ));
        let group = file(d.path(), "gw.pid", b"4242\n", 0o664);
        assert!(matches!(
            read_pid_file(&group),
            Err(Refusal::Writable { .. })
        ));
        let link = d.path().join("link.pid");
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        assert_eq!(read_pid_file(&link), Err(Refusal::Symlink(link.clone())));
        assert!(matches!(
            read_pid_file(d.path()),
            Err(Refusal::NotAFile(_)) | Err(Refusal::Unreadable { .. })
        ));
        assert!(matches!(
            read_pid_file(&d.path().join("missing")),
            Err(Refusal::Unreadable { .. })
        ));
        let neg = file(d.path(), "neg.pid", b"-1\n", 0o644);
        assert!(read_pid_file(&neg).is_err());
    }

    #[test]
    fn a_live_process_that_is_not_teleport_is_refused() {
        let mut sleep = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = sleep.id() as i32;
        let r = prove(pid, &Wanted::Named("teleport".into()), None);
        match r {
            Err(Refusal::NotTeleport { exe, .. }) => assert!(exe.ends_with("sleep"), "{exe}"),
            other => panic!("{other:?}"),
        }
        let msg = prove(pid, &Wanted::Named("teleport".into()), None)
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with(&format!("not restarting: PID {pid} is ")),
            "{msg}"
        );
        assert!(msg.ends_with(", not teleport"), "{msg}");
        // The same process, when it is the binary asked for, is proven.
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let t = prove(pid, &Wanted::Path(exe.clone()), None).unwrap();
        assert_eq!(t.exe, exe);
        assert!(matches!(
            prove(pid, &Wanted::Path(exe), Some(pid as u32 + 1)),
            Err(Refusal::Disagree { .. })
        ));
        sleep.kill().unwrap();
        sleep.wait().unwrap();
        // Reaped: the PID is gone (unless reused at once, which the exe
        // check would then refuse).
        assert!(prove(pid, &Wanted::Named("teleport".into()), None).is_err());
    }

    #[test]
    fn a_pinned_process_that_exits_is_not_signalled_under_a_reused_pid() {
        let mut sleep = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = sleep.id() as i32;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
        let t = prove(pid, &Wanted::Path(exe), None).unwrap();
        sleep.kill().unwrap();
        sleep.wait().unwrap();
        let e = t.hang_up().unwrap_err();
        assert!(e.contains("exited before it was signalled"), "{e}");
    }

    #[test]
    fn an_upgraded_binary_still_counts() {
        let w = Wanted::Named("teleport".into());
        assert!(w.matches(Path::new("/usr/local/bin/teleport")));
        assert!(w.matches(Path::new("/usr/local/bin/teleport (deleted)")));
        assert!(!w.matches(Path::new("/usr/bin/sleep")));
        assert!(!w.matches(Path::new("/usr/bin/teleport-evil")));
        let p = Wanted::Path("/opt/teleport/bin/teleport".into());
        assert!(p.matches(Path::new("/opt/teleport/bin/teleport")));
        assert!(!p.matches(Path::new("/tmp/teleport")));
    }
}
