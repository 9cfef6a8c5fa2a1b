//! The commands that act on a running Lifeline through its REST API
//! (`reconnect`, `settings`, `maintenance`), and `token new`, which makes a token and the
//! config lines that admit it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::args::{MaintenanceOp, SettingsOp};
use lifeline::config::Role;

fn describe(s: &super::client::SignalRecordIn) -> String {
    let mut line = format!("signal {} to {}: {}", s.id, s.agent, s.outcome);
    if let Some(ms) = s.latency_ms {
        line.push_str(&format!(" in {ms:.1} ms"));
    }
    if !s.detail.is_empty() {
        line.push_str(&format!(" ({})", s.detail));
    }
    line
}

pub(super) async fn reconnect(
    client: &super::client::Client,
    agent: Option<String>,
    stranded: bool,
    proxy: Option<String>,
    reason: Option<String>,
    wait: Duration,
) -> anyhow::Result<ExitCode> {
    let sent = if stranded {
        let r = client.reconnect_stranded(reason.as_deref()).await?;
        println!(
            "{} stranded agents; {} signalled, {} skipped",
            r.matched,
            r.signals.len(),
            r.skipped.len()
        );
        for s in &r.skipped {
            println!("skipped {}: {}", s.agent, s.reason);
        }
        r.signals
    } else {
        let agent = agent.context("name an agent or use --stranded")?;
        vec![
            client
                .reconnect(&agent, proxy.as_deref(), reason.as_deref())
                .await?,
        ]
    };
    let mut all_acked = true;
    for s in sent {
        let s = client.wait_final(s, wait).await?;
        println!("{}", describe(&s));
        all_acked &= s.outcome == "acked";
    }
    Ok(if all_acked {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(super) async fn settings(
    client: &super::client::Client,
    op: SettingsOp,
) -> anyhow::Result<ExitCode> {
    let out = match op {
        SettingsOp::Get { name } => client.settings_get(name.as_deref()).await?,
        SettingsOp::Set {
            name,
            value,
            force,
            confirm,
        } => {
            let v = serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value));
            client.settings_set(&name, v, force, confirm).await?
        }
        SettingsOp::Rm { name } => client.settings_rm(&name).await?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

/// One window in a line: `3  active  2026-11-28T12:00:00Z → …  proxy/p1  (why)`.
fn window_line(w: &serde_json::Value) -> String {
    let s = |k: &str| w[k].as_str().unwrap_or("").to_string();
    let targets: Vec<&str> = w["targets"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t.as_str()).collect())
        .unwrap_or_default();
    let ended = match w["ended_by"].as_str() {
        Some(by) => format!(" [ended by {by} at {}]", s("ended_at")),
        None => String::new(),
    };
    format!(
        "{:>4}  {:<9}  {} → {}  {}  ({}, by {}){ended}",
        w["id"],
        s("status"),
        s("from"),
        s("until"),
        targets.join(" "),
        s("reason"),
        s("created_by"),
    )
}

pub(super) async fn maintenance(
    client: &super::client::Client,
    op: MaintenanceOp,
) -> anyhow::Result<ExitCode> {
    match op {
        MaintenanceOp::Start {
            targets,
            length,
            until,
            from,
            reason,
            all,
        } => {
            let (from, until) = match (until, length) {
                (Some(u), _) => (from, u),
                (None, Some(d)) => {
                    // `--for` is exact: the window starts at the `from` it
                    // sends (the server's now, when not given: this
                    // machine's clock may differ), to the millisecond the
                    // API keeps, and ends `d` after it.
                    let start = match &from {
                        Some(f) => lifeline::clock::Ts::parse_rfc3339(f)
                            .with_context(|| format!("--from {f:?} is not an RFC 3339 time"))?,
                        None => match client.server_now().await? {
                            Some(t) => t,
                            None => lifeline::clock::Clock::system().now(),
                        },
                    };
                    let start =
                        lifeline::clock::Ts(start.as_micros() - start.as_micros().rem_euclid(1000));
                    (Some(start.rfc3339()), start.saturating_add(d).rfc3339())
                }
                (None, None) => anyhow::bail!("give --for or --until"),
            };
            let body = serde_json::json!({
                "targets": targets,
                "from": from,
                "until": until,
                "reason": reason,
                "all": all,
            });
            let w = client.maintenance_start(&body).await?;
            println!("maintenance window started:\n{}", window_line(&w));
            for warning in w["warnings"].as_array().into_iter().flatten() {
                eprintln!("warning: {}", warning.as_str().unwrap_or_default());
            }
        }
        MaintenanceOp::End { id } => {
            let w = client.maintenance_end(id).await?;
            println!("maintenance window ended:\n{}", window_line(&w));
        }
        MaintenanceOp::Delete { id } => {
            let w = client.maintenance_delete(id).await?;
            println!("maintenance window deleted:\n{}", window_line(&w));
        }
        MaintenanceOp::List { all } => {
            let page = client.maintenance_list(all).await?;
            let items = page["items"].as_array().cloned().unwrap_or_default();
            if items.is_empty() {
                println!(
                    "no maintenance windows{}",
                    if all { "" } else { " scheduled or active" }
                );
            }
            for w in &items {
                println!("{}", window_line(w));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn token_new(name: &str, roles: &[Role], join: bool) -> anyhow::Result<ExitCode> {
    let token = lifeline::access::generate();
    let hash = lifeline::access::hash_hex(&token);
    if join {
        println!("join token (give it to agents; it is shown only now):\n  {token}\n");
        println!("config lines:\n[access]\njoin_tokens = [\"{hash}\"]");
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        lifeline::config::valid_token_name(name),
        "--name {name:?}: {}",
        lifeline::config::TOKEN_NAME_RULE
    );
    let list: Vec<String> = roles.iter().map(|r| format!("{:?}", r.as_str())).collect();
    println!(
        "API token (send as `Authorization: Bearer <token>`; it is shown only now):\n  {token}\n"
    );
    println!(
        "config lines:\n[[access.tokens]]\nname = {name:?}\nsha256 = \"{hash}\"\nroles = [{}]",
        list.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}
