//! The command line `lifeline-agent` parses, and its manual page and
//! shell completions, generated from the same definition.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};

#[derive(Parser)]
#[command(
    name = "lifeline-agent",
    version,
    about = "Holds Lifeline's signal stream for the Teleport agent beside it, and turns a reconnect into Teleport's graceful restart"
)]
pub struct Args {
    /// The configuration file (TOML); `LIFELINE_AGENT_*` variables override it.
    #[arg(long, short, env = "LIFELINE_AGENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// Only say what a restart would do.
    #[arg(long)]
    pub dry_run: bool,
    /// Check the configuration, print what it resolves to, and exit.
    #[arg(long)]
    pub check: bool,
    /// Print the manual page (roff) and exit: `lifeline-agent --man | man -l -`.
    #[arg(long, exclusive = true)]
    pub man: bool,
    /// Print a completion script for a shell and exit.
    #[arg(long, value_enum, value_name = "SHELL", exclusive = true)]
    pub completions: Option<clap_complete::Shell>,
}

/// The manual page (roff), as `--man` prints it and the package installs it.
pub fn man_page() -> String {
    let mut out = Vec::new();
    // Rendering into memory cannot fail on I/O.
    if let Err(e) = clap_mangen::Man::new(Args::command()).render(&mut out) {
        return format!(".\\\" the manual page could not be rendered: {e}\n");
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `shell`'s completion script for `lifeline-agent`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Args::command(), "lifeline-agent", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}
