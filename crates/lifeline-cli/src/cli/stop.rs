//! How a foreground Lifeline stops: Ctrl-C or SIGTERM (exit 0), or a
//! critical task that stopped (exit 70, so that a process supervisor
//! restarts it). Shared by the server and the demo; it names neither.

use std::process::ExitCode;

/// A critical task stopped (sysexits' EX_SOFTWARE): restart me.
const EXIT_TASK_FAILED: u8 = 70;

/// Runs until Ctrl-C / SIGTERM (exit 0) or until a critical task stops
/// (exit 70, so that a process supervisor restarts Lifeline).
pub(super) async fn run_until_stopped(failed: lifeline::supervise::FailureWatch) -> ExitCode {
    tokio::select! {
        _ = wait_for_signal() => ExitCode::SUCCESS,
        f = failed.wait() => {
            eprintln!("lifeline: task {} stopped: {}; exiting", f.task, f.why);
            ExitCode::from(EXIT_TASK_FAILED)
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
