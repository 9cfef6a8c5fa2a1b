//! What `deploy/` ships agrees with the binary: the Kubernetes base's
//! PrometheusRule and Grafana dashboard ConfigMap are exactly what
//! `lifeline alert-rules --kubernetes` and `lifeline grafana-dashboard
//! --kubernetes` print, so neither drifts from the metrics.

use std::time::Duration;

use lifeline::telemetry::{alerts, grafana};

/// The external URL the committed files were written with.
const URL: &str = "https://lifeline.example.com";

fn committed(rel: &str) -> String {
    let p = crate::support::repo().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn same(rel: &str, printed: &str, regenerate: &str) {
    assert!(
        committed(rel) == printed,
        "{rel} differs from what the binary prints; regenerate it:\n  {regenerate} > {rel}"
    );
}

#[test]
fn the_prometheus_rule_is_what_alert_rules_prints() {
    let s = alerts::AlertSettings {
        external_url: URL.into(),
        stranded_for: Duration::from_secs(300),
    };
    same(
        "deploy/kubernetes/base/prometheusrule.yaml",
        &alerts::prometheus_rule_yaml(&s),
        &format!("lifeline alert-rules --kubernetes --external-url {URL}"),
    );
}

#[test]
fn the_dashboard_configmap_is_what_grafana_dashboard_prints() {
    same(
        "deploy/kubernetes/base/grafana-dashboard.yaml",
        &grafana::configmap_yaml(URL),
        &format!("lifeline grafana-dashboard --kubernetes --external-url {URL}"),
    );
}
