//! The commands that act on a running Lifeline through its REST API
//! (`reconnect`, `settings`), and `token new`, which makes a token and the
//! config lines that admit it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

use super::args::SettingsOp;
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
