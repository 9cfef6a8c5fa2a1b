//! This binary run again as a hidden bench scenario, so the load it makes
//! is measured apart from Lifeline.

use super::*;

/// This binary run again as `lifeline-bench <args>` (a hidden scenario),
/// talking over its stdin and stdout, killed if dropped.
pub(crate) struct BenchChild {
    proc: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl BenchChild {
    pub(crate) fn spawn(args: &[String], env: &[(&str, &str)]) -> Result<BenchChild, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::Agents(e.to_string()))?;
        let mut proc = tokio::process::Command::new(exe)
            .args(args)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                BenchError::Agents(format!("cannot start `lifeline-bench {}`: {e}", args[0]))
            })?;
        let (Some(stdin), Some(out)) = (proc.stdin.take(), proc.stdout.take()) else {
            return Err(BenchError::Agents(format!(
                "`lifeline-bench {}` has no stdio",
                args[0]
            )));
        };
        Ok(BenchChild {
            proc,
            stdin: Some(stdin),
            lines: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(out)),
        })
    }

    /// Spawns a child that serves something and says where on its first
    /// line, `listening <where>`: the child, and where.
    pub(crate) async fn spawn_listening(
        args: &[String],
        what: &'static str,
    ) -> Result<(BenchChild, String), BenchError> {
        let mut child = BenchChild::spawn(args, &[])?;
        let line = child
            .line(Instant::now() + Duration::from_secs(600), what)
            .await?;
        let at = line
            .strip_prefix("listening ")
            .ok_or_else(|| BenchError::Agents(format!("{what}: the child said {line:?}")))?
            .to_string();
        Ok((child, at))
    }

    /// Its process ID, while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.proc.id()
    }

    /// Its next line, waiting until `deadline`.
    pub(crate) async fn line(
        &mut self,
        deadline: Instant,
        what: &'static str,
    ) -> Result<String, BenchError> {
        tokio::time::timeout_at(deadline.into(), self.lines.next_line())
            .await
            .map_err(|_| BenchError::Timeout(what))?
            .map_err(|e| BenchError::Agents(e.to_string()))?
            .ok_or_else(|| BenchError::Agents(format!("the child process ended early ({what})")))
    }

    pub(crate) async fn send(&mut self, line: &str) -> Result<(), BenchError> {
        use tokio::io::AsyncWriteExt;
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Agents("the child's stdin is closed".into()))?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| BenchError::Agents(format!("child process: {e}")))
    }

    /// Closes its stdin (its signal to finish) and returns what it prints
    /// until it exits.
    pub(crate) async fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let mut out = Vec::new();
        while let Ok(Some(line)) = self.lines.next_line().await {
            out.push(line);
        }
        let _ = self.proc.wait().await;
        out
    }
}
