//! `lifeline alert-rules`: Prometheus alerting rules over the metrics
//! `/metrics` serves. Every expression names its metrics through
//! `stats::metric`, so a rename reaches the rules; a test scrapes a running
//! Lifeline and checks that every metric the rules use is served.
//!
//! Each rule's annotations name the resource at fault (from the series'
//! labels) and link to the dashboard page that shows it, under the
//! operator's `external_url`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::stats::metric;

/// What the rules are built with.
#[derive(Clone, Debug)]
pub struct AlertSettings {
    /// Where operators reach the dashboard (`server.external_url`), no
    /// trailing slash.
    pub external_url: String,
    /// How long a root cause may strand agents before it pages.
    pub stranded_for: Duration,
}

/// One alerting rule.
struct Rule {
    alert: &'static str,
    expr: String,
    /// How long the expression must hold; `None` pages at once.
    hold: Option<&'static str>,
    severity: &'static str,
    summary: String,
    description: String,
    /// The dashboard page, a path under `external_url` (may use labels).
    page: String,
    /// What on-call should do, for the book's troubleshooting page.
    action: &'static str,
}

fn rules(s: &AlertSettings) -> Vec<Rule> {
    let stranded_secs = s.stranded_for.as_secs().max(1);
    let stranded_for = humantime::format_duration(Duration::from_secs(stranded_secs));
    vec![
        Rule {
            alert: "LifelineAgentsStranded",
            expr: format!(
                "{} and {} > {stranded_secs}",
                metric::ROOT_CAUSE_AGENTS,
                metric::ROOT_CAUSE_AGE_SECONDS
            ),
            hold: None,
            severity: "critical",
            summary: "{{ $value }} agents stranded by {{ $labels.cause }} of {{ $labels.resource }}"
                .into(),
            description: format!(
                "Agents have been stranded for more than {stranded_for}: root cause {{{{ $labels.cause }}}}, resource {{{{ $labels.resource }}}} (Lifeline {{{{ $labels.instance }}}}). Check that Lifeline's reconnect signals reach them and that a live proxy is left to move to."
            ),
            page: "/agents?state=stranded{{ if or (eq $labels.cause \"proxy_expired\") (eq $labels.cause \"proxy_missing\") }}&proxy={{ $labels.resource | urlquery }}{{ else if or (eq $labels.cause \"auth_not_serving\") (eq $labels.cause \"auth_unknown\") }}&auth_server={{ $labels.resource | urlquery }}{{ end }}".into(),
            action: "Open the dashboard's stranded agents for that cause. If no signal reaches them (Signals page: undeliverable, timed out), check that their sidecars hold a stream; if every proxy is down, bring one back: reconnects need somewhere to go.",
        },
        Rule {
            alert: "LifelineAuthServerNotServing",
            expr: format!("{}{{health=\"NOT_SERVING\"}} == 1", metric::AUTH_SERVER_HEALTH),
            hold: Some("1m"),
            severity: "critical",
            summary: "Auth server {{ $labels.auth_server }} is NOT_SERVING".into(),
            description: "Auth server {{ $labels.auth_server }} has answered NOT_SERVING on its gRPC health stream for a minute; the agents attached to it are stranded as auth_unhealthy (Lifeline {{ $labels.instance }}).".into(),
            page: "/auth".into(),
            action: "Look at that Auth server's own logs and `/readyz`; restart or replace it. Lifeline moves its agents to a healthy Auth as they reconnect.",
        },
        Rule {
            alert: "LifelineWatcherStale",
            expr: format!("{}{{state=\"stale\"}} == 1", metric::WATCHER_STATE),
            hold: Some("2m"),
            severity: "critical",
            summary: "Lifeline's watch of {{ $labels.kind }} is stale".into(),
            description: "Lifeline lost its watch stream for {{ $labels.kind }} two minutes ago and has not resynced; agent states are frozen, not computed, until it does (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "Check Lifeline's log for the source's error and `/readyz`'s `source_phase`: the Auth address, its certificate and the identity's expiry are the usual causes.",
        },
        Rule {
            alert: "LifelineWatcherNotReady",
            expr: format!(
                "{}{{state=~\"initializing|rejected\"}} == 1",
                metric::WATCHER_STATE
            ),
            hold: Some("5m"),
            severity: "warning",
            summary: "Lifeline's watch of {{ $labels.kind }} is {{ $labels.state }}".into(),
            description: "For five minutes Lifeline has not listed {{ $labels.kind }} (state {{ $labels.state }}: still initializing, or refused by the cluster's access rules); it cannot tell which agents are stranded by it (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "A kind `rejected` or `unwatched` needs the role to read it (`/readyz` names it); one still `initializing` is a listing that has not finished: check the Auth's load and Lifeline's log.",
        },
        Rule {
            alert: "LifelineStormGuardPaused",
            expr: format!("{} == 1", metric::STORM_GUARD_PAUSED),
            hold: None,
            severity: "warning",
            summary: "Lifeline paused automatic reconnects (storm guard)".into(),
            description: format!(
                "Too many agents turned stranded at once ({{{{ with printf \"{}{{instance='%s'}}\" $labels.instance | query }}}}{{{{ . | first | value }}}}{{{{ end }}}} in the storm window), so Lifeline stopped reconnecting them automatically. Manual reconnects still work (Lifeline {{{{ $labels.instance }}}}).",
                metric::STORM_GUARD_STRANDED_IN_WINDOW
            ),
            page: "/".into(),
            action: "Expected when a cluster-wide cause strands most agents at once. Find the cause on the overview; reconnects resume after `signals.storm_window`, or reconnect by hand.",
        },
        Rule {
            alert: "LifelineSignalsFailing",
            expr: format!(
                "sum without (kind, outcome) (rate({m}{{outcome=~\"failed|undeliverable|timeout\"}}[10m])) / sum without (kind, outcome) (rate({m}{{outcome!=\"sent\"}}[10m])) > 0.1",
                m = metric::SIGNALS_TOTAL
            ),
            hold: Some("5m"),
            severity: "warning",
            summary: "{{ $value | humanizePercentage }} of Lifeline's signals fail or time out".into(),
            description: "Over ten minutes, more than one signal in ten ended failed, undeliverable or timed out: agents are not acting on reconnects (Lifeline {{ $labels.instance }}).".into(),
            page: "/signals".into(),
            action: "Open the Signals page filtered by outcome: `undeliverable` means no stream to that agent, `failed` names the agent's reason, `timeout` a sidecar that did not answer.",
        },
        Rule {
            alert: "LifelineStoreFailing",
            expr: format!("{} == 1", metric::STORE_FAILING),
            hold: Some("1m"),
            severity: "critical",
            summary: "Lifeline's database refuses writes".into(),
            description: "For a minute the database has refused Lifeline's writes; state and episodes are held and retried, history is shed once the queue is full. Check the disk and the database's logs (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "Check the disk (SQLite) or the database server and its logs (PostgreSQL); `/readyz`'s `store_failing` says the last error. Nothing is lost while it retries, until history is shed.",
        },
        Rule {
            alert: "LifelineStoreSheddingHistory",
            expr: format!(
                "increase({}{{outcome=\"dropped\"}}[10m]) > 0",
                metric::STORE_HISTORY_ROWS_TOTAL
            ),
            hold: None,
            severity: "warning",
            summary: "Lifeline dropped {{ $value | humanize }} history rows".into(),
            description: "The database fell behind and Lifeline shed history rows in the last ten minutes; current state is kept (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "The database is slower than the fleet's heartbeats: give it faster storage, or on PostgreSQL check its load; current state and episodes are kept.",
        },
        Rule {
            alert: "LifelineTraceSpansDropped",
            expr: format!(
                "increase({}[10m]) > 0",
                metric::TRACE_SPANS_DROPPED_TOTAL
            ),
            hold: None,
            severity: "info",
            summary: "Lifeline dropped {{ $value | humanize }} trace spans ({{ $labels.reason }})".into(),
            description: "Spans were lost in the last ten minutes ({{ $labels.reason }}: the export queue was full or the OTLP collector failed); traces of that time are incomplete (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "Check the OTLP collector (`telemetry.otlp_endpoint`): is it up and keeping pace? Traces of the time shown are incomplete; nothing else is affected.",
        },
        Rule {
            alert: "LifelineClusterIdentityExpiring",
            expr: format!(
                "({0} - time()) < 15 * 60 and {0} > 0",
                metric::CLUSTER_IDENTITY_EXPIRY
            ),
            hold: None,
            severity: "critical",
            summary: "Lifeline's cluster identity expires {{ $value | humanizeDuration }} from now".into(),
            description: "The client certificate in cluster.identity_file expires within 15 minutes: its renewal (tbot, or whoever signs it) has stopped. When it expires Lifeline loses the cluster (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "Renew `cluster.identity_file` now (tbot: check that it runs and can reach the cluster); Lifeline reads the new file at its next dial.",
        },
        Rule {
            alert: "LifelineTlsCertificateExpiring",
            expr: format!(
                "({0} - time()) < 14 * 86400 and {0} > 0",
                metric::TLS_CERTIFICATE_EXPIRY
            ),
            hold: None,
            severity: "warning",
            summary: "Lifeline's TLS certificate expires {{ $value | humanizeDuration }} from now".into(),
            description: "The certificate Lifeline serves on its HTTP and gRPC listeners (server.tls_cert) expires within 14 days. Write renewed files in place: Lifeline reloads them without a restart (Lifeline {{ $labels.instance }}).".into(),
            page: "/".into(),
            action: "Renew `server.tls_cert` and `server.tls_key` in place; Lifeline reloads them without a restart.",
        },
    ]
}

/// The rules as one Prometheus rule group, as JSON.
pub fn rule_groups(s: &AlertSettings) -> Value {
    let base = s.external_url.trim_end_matches('/');
    let rules: Vec<Value> = rules(s)
        .into_iter()
        .map(|r| {
            let mut v = json!({
                "alert": r.alert,
                "expr": r.expr,
                "labels": {"severity": r.severity},
                "annotations": {
                    "summary": r.summary,
                    "description": r.description,
                    "dashboard": format!("{base}{}", r.page),
                },
            });
            if let Some(hold) = r.hold {
                v["for"] = json!(hold);
            }
            v
        })
        .collect();
    json!({"groups": [{"name": "lifeline", "rules": rules}]})
}

/// The rules file Prometheus loads (`rule_files`), as YAML.
pub fn rules_yaml(s: &AlertSettings) -> String {
    let mut out = String::from(
        "# Lifeline's alerting rules: `lifeline alert-rules` writes this file.\n# Check with `promtool check rules`; load it under `rule_files`.\n",
    );
    yaml(&rule_groups(s), 0, &mut out);
    out
}

/// The same rules as a Prometheus Operator `PrometheusRule`, as YAML
/// (`lifeline alert-rules --kubernetes`; deploy/kubernetes/base holds it).
pub fn prometheus_rule_yaml(s: &AlertSettings) -> String {
    let rule = json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "lifeline",
            "labels": {"app.kubernetes.io/name": "lifeline"},
        },
        "spec": rule_groups(s),
    });
    let mut out = String::from(
        "# Lifeline's alerting rules for the Prometheus Operator: `lifeline alert-rules\n# --kubernetes` writes this file.\n",
    );
    yaml(&rule, 0, &mut out);
    out
}

/// The rules as the book's table (`docs/src/reference/alerts.md`): each
/// alert, its severity, how long it must hold, what it means and what to
/// do.
pub fn rules_markdown(s: &AlertSettings) -> String {
    let cell = |t: &str| t.replace('|', "\\|").replace('\n', " ");
    let mut out =
        String::from("| alert | severity | for | means | what to do |\n|---|---|---|---|---|\n");
    for r in rules(s) {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            r.alert,
            r.severity,
            r.hold.unwrap_or("at once"),
            cell(&r.description),
            cell(r.action),
        ));
    }
    out
}

/// Every expression of the rules.
pub fn expressions(s: &AlertSettings) -> Vec<String> {
    rules(s).into_iter().map(|r| r.expr).collect()
}

/// The `lifeline_*` metric names an expression reads, histogram series
/// (`_bucket`, `_sum`, `_count`) named by their family.
pub fn metrics_in(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("lifeline_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        if !out.iter().any(|n| n == family) {
            out.push(family.to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// YAML in block style, every string a double-quoted scalar written as a
/// JSON string (a JSON string is a valid YAML double-quoted scalar), so
/// nothing in an expression or a template needs YAML's own quoting rules.
/// `v` as block YAML; keys are written bare (Lifeline's own, never
/// input), scalars as JSON (which YAML reads), and a string of several
/// lines as a literal block.
pub(crate) fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.push_str(&pad);
                out.push_str(k);
                out.push(':');
                if is_block(v) {
                    out.push('\n');
                    yaml(v, indent + 2, out);
                } else if let Some(text) = v.as_str().filter(|t| is_literal(t)) {
                    out.push_str(" |-\n");
                    for line in text.lines() {
                        if !line.is_empty() {
                            out.push_str(&pad);
                            out.push_str("  ");
                            out.push_str(line);
                        }
                        out.push('\n');
                    }
                } else {
                    out.push(' ');
                    out.push_str(&v.to_string());
                    out.push('\n');
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                out.push_str(&pad);
                out.push_str("- ");
                if is_block(item) {
                    // The item's first line follows the dash.
                    let mut inner = String::new();
                    yaml(item, indent + 2, &mut inner);
                    out.push_str(inner.trim_start());
                } else {
                    out.push_str(&item.to_string());
                    out.push('\n');
                }
            }
        }
        scalar => {
            out.push_str(&pad);
            out.push_str(&scalar.to_string());
            out.push('\n');
        }
    }
}

/// A string YAML's literal block keeps exactly: several lines, each
/// without trailing blanks, tabs or other control characters, and no
/// leading blank on its first line (which would set the indentation).
fn is_literal(t: &str) -> bool {
    t.contains('\n')
        && !t.ends_with('\n')
        && !t.starts_with([' ', '\n'])
        && t.lines().all(|l| !l.ends_with(' '))
        && !t.chars().any(|c| c.is_control() && c != '\n')
}

fn is_block(v: &Value) -> bool {
    match v {
        Value::Object(m) => !m.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> AlertSettings {
        AlertSettings {
            external_url: "https://lifeline.example.com/".into(),
            stranded_for: Duration::from_secs(300),
        }
    }

    #[test]
    fn every_rule_links_to_the_dashboard_and_names_its_resource() {
        let v = rule_groups(&settings());
        let rules = v["groups"][0]["rules"].as_array().unwrap();
        assert!(rules.len() >= 9);
        for r in rules {
            let a = &r["annotations"];
            let link = a["dashboard"].as_str().unwrap();
            assert!(link.starts_with("https://lifeline.example.com/"), "{link}");
            assert!(!link.contains(".com//"), "{link}");
            assert!(a["summary"].as_str().unwrap().len() > 10);
            assert!(
                a["description"].as_str().unwrap().contains("$labels."),
                "{r}"
            );
        }
        let stranded = &rules[0];
        assert!(stranded["expr"].as_str().unwrap().ends_with("> 300"));
        assert!(stranded["annotations"]["description"]
            .as_str()
            .unwrap()
            .contains("5m"));
    }

    #[test]
    fn the_yaml_is_the_json_in_block_style() {
        let text = rules_yaml(&settings());
        assert!(text.contains("groups:\n  - name: \"lifeline\"\n    rules:\n      - alert: \"LifelineAgentsStranded\"\n"), "{text}");
        // Quotes inside templates survive as JSON escapes.
        assert!(
            text.contains(r#"(eq $labels.cause \"proxy_expired\")"#),
            "{text}"
        );
        assert!(text.contains("        for: \"1m\"\n"), "{text}");
    }

    #[test]
    fn metric_names_are_read_from_expressions() {
        assert_eq!(
            metrics_in("histogram_quantile(0.99, sum by (le) (rate(lifeline_store_commit_seconds_bucket[5m]))) / lifeline_agents"),
            vec!["lifeline_store_commit_seconds", "lifeline_agents"]
        );
        for e in expressions(&settings()) {
            assert!(!metrics_in(&e).is_empty(), "{e}");
        }
    }
}
