//! `lifeline grafana-dashboard`: a Grafana dashboard (JSON, for import)
//! over the metrics `/metrics` serves, named through `stats::metric` as the
//! alert rules are. Rows follow the data flow: the fleet and what strands
//! it, ingest, signals, the store and Lifeline's own traces, and TLS.

use serde_json::{json, Value};

use crate::stats::metric;

/// One panel: a title, what it shows, and its queries with their legends.
struct Panel {
    title: &'static str,
    description: &'static str,
    kind: PanelKind,
    unit: &'static str,
    targets: Vec<(String, &'static str)>,
}

#[derive(Clone, Copy)]
enum PanelKind {
    TimeSeries,
    Stat,
    Table,
}

impl PanelKind {
    fn as_str(self) -> &'static str {
        match self {
            PanelKind::TimeSeries => "timeseries",
            PanelKind::Stat => "stat",
            PanelKind::Table => "table",
        }
    }
}

fn ts(
    title: &'static str,
    description: &'static str,
    unit: &'static str,
    targets: Vec<(String, &'static str)>,
) -> Panel {
    Panel {
        title,
        description,
        kind: PanelKind::TimeSeries,
        unit,
        targets,
    }
}

/// A latency quantile of a histogram.
fn quantile(q: f64, family: &str, by: &str) -> String {
    format!("histogram_quantile({q}, sum by (le{by}) (rate({family}_bucket{{instance=~\"$instance\"}}[$__rate_interval])))")
}

/// The rows, each a title and its panels.
fn rows() -> Vec<(&'static str, Vec<Panel>)> {
    let i = "{instance=~\"$instance\"}";
    vec![
        (
            "Fleet",
            vec![
                Panel {
                    title: "Stranded agents",
                    description: "Agents no client can reach or discover now.",
                    kind: PanelKind::Stat,
                    unit: "short",
                    targets: vec![(
                        format!(
                            "sum({}{{state=\"stranded\",instance=~\"$instance\"}})",
                            metric::AGENTS
                        ),
                        "stranded",
                    )],
                },
                ts(
                    "Agents by state",
                    "Healthy, degraded (some tunnels lost) and stranded agents.",
                    "short",
                    vec![(
                        format!("sum by (state) ({}{i})", metric::AGENTS),
                        "{{state}}",
                    )],
                ),
                Panel {
                    title: "Root causes",
                    description: "Stranded agents grouped by what stranded them, and for how long.",
                    kind: PanelKind::Table,
                    unit: "short",
                    targets: vec![
                        (
                            format!(
                                "max by (cause, resource) ({}{i})",
                                metric::ROOT_CAUSE_AGENTS
                            ),
                            "agents",
                        ),
                        (
                            format!(
                                "max by (cause, resource) ({}{i})",
                                metric::ROOT_CAUSE_AGE_SECONDS
                            ),
                            "seconds",
                        ),
                    ],
                },
                ts(
                    "Proxies",
                    "Proxies live and expired.",
                    "short",
                    vec![(
                        format!("sum by (status) ({}{i})", metric::PROXIES),
                        "{{status}}",
                    )],
                ),
                ts(
                    "Auth server health",
                    "Each auth server's gRPC health (1 for its current state).",
                    "short",
                    vec![(
                        format!(
                            "max by (auth_server, health) ({}{i})",
                            metric::AUTH_SERVER_HEALTH
                        ),
                        "{{auth_server}} {{health}}",
                    )],
                ),
                ts(
                    "Agents waiting for a live proxy",
                    "Degraded or stranded agents with no live proxy to move to.",
                    "short",
                    vec![(
                        format!("sum({}{i})", metric::AGENTS_WAITING_FOR_LIVE_PROXY),
                        "waiting",
                    )],
                ),
            ],
        ),
        (
            "Ingest",
            vec![
                ts(
                    "Watcher state",
                    "Each watched kind's state (1 for its current state).",
                    "short",
                    vec![(
                        format!("max by (kind, state) ({}{i}) == 1", metric::WATCHER_STATE),
                        "{{kind}} {{state}}",
                    )],
                ),
                ts(
                    "Events applied",
                    "Watcher events applied per second, by kind and type.",
                    "ops",
                    vec![(
                        format!(
                            "sum by (kind, type) (rate({}{i}[$__rate_interval]))",
                            metric::EVENTS_INGESTED_TOTAL
                        ),
                        "{{kind}} {{type}}",
                    )],
                ),
                ts(
                    "Inputs rejected",
                    "Inputs refused per second, by reason.",
                    "ops",
                    vec![(
                        format!(
                            "sum by (reason) (rate({}{i}[$__rate_interval]))",
                            metric::EVENTS_REJECTED_TOTAL
                        ),
                        "{{reason}}",
                    )],
                ),
                ts(
                    "Streams lost",
                    "Watch and health streams lost per second.",
                    "ops",
                    vec![
                        (
                            format!(
                                "sum(rate({}{i}[$__rate_interval]))",
                                metric::WATCH_STREAM_FAILURES_TOTAL
                            ),
                            "watch",
                        ),
                        (
                            format!(
                                "sum(rate({}{i}[$__rate_interval]))",
                                metric::HEALTH_STREAM_FAILURES_TOTAL
                            ),
                            "health",
                        ),
                    ],
                ),
                ts(
                    "Detection latency",
                    "From a condition's start (an expiry, a health change) to the agent flagged.",
                    "s",
                    vec![
                        (quantile(0.5, metric::DETECTION, ""), "p50"),
                        (quantile(0.99, metric::DETECTION, ""), "p99"),
                    ],
                ),
            ],
        ),
        (
            "Signals",
            vec![
                ts(
                    "Signals by outcome",
                    "Audited signals per second, by kind and outcome.",
                    "ops",
                    vec![(
                        format!(
                            "sum by (kind, outcome) (rate({}{i}[$__rate_interval]))",
                            metric::SIGNALS_TOTAL
                        ),
                        "{{kind}} {{outcome}}",
                    )],
                ),
                ts(
                    "Signal latency",
                    "From a signal's creation to the agent's ack.",
                    "s",
                    vec![
                        (
                            quantile(0.5, metric::SIGNAL_LATENCY, ", kind"),
                            "p50 {{kind}}",
                        ),
                        (
                            quantile(0.99, metric::SIGNAL_LATENCY, ", kind"),
                            "p99 {{kind}}",
                        ),
                    ],
                ),
                ts(
                    "Connected agents and signals in flight",
                    "Agents on AgentSignals.Connect; signals awaiting an ack.",
                    "short",
                    vec![
                        (format!("sum({}{i})", metric::AGENT_STREAMS), "connected"),
                        (
                            format!("sum({}{i})", metric::SIGNALS_IN_FLIGHT),
                            "in flight",
                        ),
                    ],
                ),
                ts(
                    "Storm guard",
                    "1 while automatic reconnects are paused; agents stranded in the window.",
                    "short",
                    vec![
                        (format!("max({}{i})", metric::STORM_GUARD_PAUSED), "paused"),
                        (
                            format!("max({}{i})", metric::STORM_GUARD_STRANDED_IN_WINDOW),
                            "stranded in window",
                        ),
                    ],
                ),
                ts(
                    "Discovery traffic",
                    "Encoded bytes of Discovery sent per second, delta and full.",
                    "Bps",
                    vec![(
                        format!(
                            "sum by (mode) (rate({}{i}[$__rate_interval]))",
                            metric::DISCOVERY_BYTES_TOTAL
                        ),
                        "{{mode}}",
                    )],
                ),
            ],
        ),
        (
            "Store and traces",
            vec![
                ts(
                    "Store failing",
                    "1 while the database refuses writes.",
                    "short",
                    vec![(format!("max({}{i})", metric::STORE_FAILING), "failing")],
                ),
                ts(
                    "History rows",
                    "History rows committed and dropped per second.",
                    "ops",
                    vec![(
                        format!(
                            "sum by (outcome) (rate({}{i}[$__rate_interval]))",
                            metric::STORE_HISTORY_ROWS_TOTAL
                        ),
                        "{{outcome}}",
                    )],
                ),
                ts(
                    "Commit latency",
                    "One write transaction, begin to commit.",
                    "s",
                    vec![(quantile(0.99, metric::STORE_COMMIT, ""), "p99")],
                ),
                ts(
                    "Trace spans",
                    "Spans exported and dropped per second.",
                    "ops",
                    vec![
                        (
                            format!(
                                "sum(rate({}{i}[$__rate_interval]))",
                                metric::TRACE_SPANS_EXPORTED_TOTAL
                            ),
                            "exported",
                        ),
                        (
                            format!(
                                "sum by (reason) (rate({}{i}[$__rate_interval]))",
                                metric::TRACE_SPANS_DROPPED_TOTAL
                            ),
                            "dropped {{reason}}",
                        ),
                    ],
                ),
            ],
        ),
        (
            "TLS",
            vec![
                Panel {
                    title: "Certificate expires in",
                    description: "Time left on the certificate Lifeline serves (server.tls_cert); empty without TLS.",
                    kind: PanelKind::Stat,
                    unit: "s",
                    targets: vec![(
                        format!(
                            "min({0}{i} > 0) - time()",
                            metric::TLS_CERTIFICATE_EXPIRY
                        ),
                        "left",
                    )],
                },
                ts(
                    "Handshakes failed",
                    "TLS handshakes on Lifeline's listeners that failed or timed out, per second: untrusting clients, plaintext to a TLS port, refused client certificates.",
                    "ops",
                    vec![(
                        format!(
                            "sum by (listener) (rate({}{i}[$__rate_interval]))",
                            metric::TLS_HANDSHAKE_FAILURES_TOTAL
                        ),
                        "{{listener}}",
                    )],
                ),
                ts(
                    "Certificate reloads",
                    "Changed certificate files: loaded, or refused (the previous certificate stays).",
                    "short",
                    vec![(
                        format!(
                            "sum by (outcome) (increase({}{i}[$__rate_interval]))",
                            metric::TLS_RELOADS_TOTAL
                        ),
                        "{{outcome}}",
                    )],
                ),
            ],
        ),
    ]
}

/// The dashboard as a ConfigMap that Grafana's dashboard sidecar loads
/// (label `grafana_dashboard: "1"`), as YAML (`lifeline grafana-dashboard
/// --kubernetes`; deploy/kubernetes/base holds it).
pub fn configmap_yaml(external_url: &str) -> String {
    let body = serde_json::to_string_pretty(&dashboard(external_url)).unwrap_or_default();
    let map = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "lifeline-grafana-dashboard",
            "labels": {"app.kubernetes.io/name": "lifeline", "grafana_dashboard": "1"},
        },
        "data": {"lifeline.json": body},
    });
    let mut out = String::from(
        "# Lifeline's Grafana dashboard for Grafana's dashboard sidecar: `lifeline\n# grafana-dashboard --kubernetes` writes this file.\n",
    );
    super::alerts::yaml(&map, 0, &mut out);
    out
}

/// The dashboard, for Grafana's import (datasource chosen at import).
/// `external_url` is where Lifeline's own dashboard is linked from it.
pub fn dashboard(external_url: &str) -> Value {
    let base = external_url.trim_end_matches('/');
    let mut panels = Vec::new();
    let mut id = 1;
    let mut y = 0;
    for (row, list) in rows() {
        panels.push(json!({
            "type": "row", "id": id, "title": row, "collapsed": false,
            "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
            "panels": [],
        }));
        id += 1;
        y += 1;
        for (n, p) in list.into_iter().enumerate() {
            let targets: Vec<Value> = p
                .targets
                .iter()
                .zip('A'..)
                .map(|((expr, legend), ref_id)| {
                    json!({
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": expr,
                        "legendFormat": legend,
                        "refId": ref_id.to_string(),
                        "instant": matches!(p.kind, PanelKind::Table),
                        "format": if matches!(p.kind, PanelKind::Table) { "table" } else { "time_series" },
                    })
                })
                .collect();
            // A table joins its queries' columns on their labels.
            let transformations = match p.kind {
                PanelKind::Table => json!([{"id": "merge", "options": {}}]),
                _ => json!([]),
            };
            panels.push(json!({
                "type": p.kind.as_str(),
                "transformations": transformations,
                "id": id,
                "title": p.title,
                "description": p.description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 8, "x": (n % 3) * 8, "y": y + (n / 3) as i64 * 8},
                "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
                "options": {},
                "targets": targets,
            }));
            id += 1;
        }
        y += 16;
    }
    json!({
        "title": "Lifeline",
        "uid": "lifeline",
        "description": "Lifeline: stranded agents, what stranded them, and Lifeline's own pipeline.",
        "tags": ["lifeline", "teleport"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "links": [{
            "title": "Lifeline dashboard",
            "type": "link",
            "url": format!("{base}/"),
            "targetBlank": true,
            "icon": "external link",
        }],
        "templating": {"list": [
            {
                "name": "datasource", "label": "Prometheus", "type": "datasource",
                "query": "prometheus", "current": {}, "hide": 0,
            },
            {
                "name": "instance", "label": "Lifeline", "type": "query",
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "query": format!("label_values({}, instance)", metric::AGENTS),
                "definition": format!("label_values({}, instance)", metric::AGENTS),
                "refresh": 2, "includeAll": true, "multi": true,
                "current": {}, "hide": 0,
            },
        ]},
        "panels": panels,
    })
}

/// Every query of the dashboard.
pub fn expressions() -> Vec<String> {
    rows()
        .into_iter()
        .flat_map(|(_, panels)| panels)
        .flat_map(|p| p.targets.into_iter().map(|(e, _)| e))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_have_unique_ids_queries_and_a_datasource() {
        let d = dashboard("https://lifeline.example.com");
        let panels = d["panels"].as_array().unwrap();
        let mut ids: Vec<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n);
        for p in panels.iter().filter(|p| p["type"] != "row") {
            assert!(!p["targets"].as_array().unwrap().is_empty(), "{p}");
            assert_eq!(p["datasource"]["uid"], "${datasource}");
        }
        assert_eq!(d["links"][0]["url"], "https://lifeline.example.com/");
        let causes = panels.iter().find(|p| p["title"] == "Root causes").unwrap();
        assert_eq!(causes["transformations"][0]["id"], "merge");
        assert_eq!(causes["targets"][0]["format"], "table");
        assert!(expressions().len() >= 20);
    }
}
