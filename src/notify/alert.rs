//! An incident as an Alertmanager v2 alert (`POST /api/v2/alerts`): its
//! labels name it (one alert per incident and severity), its annotations
//! say what it is and what Lifeline did, and `endsAt` says how long it
//! holds without another post.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::clock::Ts;
use crate::domain::{About, ClusterName, Incident, Severity};

/// `alertname` of every incident alert.
pub const ALERT_NAME: &str = "LifelineIncident";

/// One alert of Alertmanager's v2 API (`postableAlert`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub labels: BTreeMap<&'static str, String>,
    pub annotations: BTreeMap<&'static str, String>,
    pub starts_at: String,
    pub ends_at: String,
    #[serde(rename = "generatorURL")]
    pub generator_url: String,
}

/// Where the alert points: the cluster it is about, Lifeline's external
/// URL and the runbook (empty: the incident's own page).
#[derive(Clone, Debug)]
pub struct Context {
    /// The cluster a notice names none of is about (a pause, a window,
    /// or an incident stored before clusters were named): the one
    /// configured.
    pub home: ClusterName,
    /// `[notify] cluster`, where set: the one-cluster form's label
    /// instead of its name.
    pub relabel: Option<String>,
    pub external_url: String,
    pub runbook_url: String,
}

impl Context {
    /// The `cluster` label and body field of a notice about `about`: its
    /// incident's cluster, else the configured one; the one-cluster
    /// form's `[notify] cluster` instead, where set.
    pub fn cluster(&self, about: &About) -> String {
        match about {
            About::Incident(i) => self.incident_cluster(i),
            _ => self.label(None),
        }
    }

    /// [`Context::cluster`] of a notice about incident `i`, without
    /// building the notice.
    pub fn incident_cluster(&self, i: &Incident) -> String {
        self.label(Some(&i.cluster))
    }

    /// The one rule: the relabel, else the cluster named (when it is
    /// named), else the configured one.
    fn label(&self, named: Option<&ClusterName>) -> String {
        match (&self.relabel, named) {
            (Some(label), _) => label.clone(),
            (None, Some(c)) if !c.as_str().is_empty() => c.to_string(),
            (None, _) => self.home.to_string(),
        }
    }

    /// The incident's page on the dashboard.
    pub fn page(&self, id: i64) -> String {
        format!("{}/incidents/{id}", self.external_url)
    }
}

/// The incident's alert as of `now`: open, it ends `ends_after` from now
/// unless posted again; ended, it ends when the incident did. `severity`
/// names the labels' severity (an earlier one, to resolve it).
pub fn alert(
    i: &Incident,
    cx: &Context,
    now: Ts,
    ends_after: Duration,
    severity: Severity,
) -> Alert {
    let ends = match i.ended {
        Some(e) => e,
        None => now.saturating_add(ends_after),
    };
    let mut labels = BTreeMap::from([
        ("alertname", ALERT_NAME.to_string()),
        ("cause", i.cause.as_str().to_string()),
        ("resource", i.resource.clone()),
        ("severity", severity.as_str().to_string()),
        ("cluster", cx.incident_cluster(i)),
        ("lifeline_incident", i.id.to_string()),
    ]);
    // A rollout's incident is told as such: route or inhibit it on
    // `planned="rollout"`.
    if let Some(p) = &i.planned {
        labels.insert("planned", p.kind.to_string());
    }
    let page = cx.page(i.id);
    let runbook = if cx.runbook_url.is_empty() {
        page.clone()
    } else {
        cx.runbook_url.clone()
    };
    let annotations = BTreeMap::from([
        ("summary", format!("Incident {}: {}", i.id, i.title)),
        ("description", description(i)),
        ("runbook_url", runbook),
    ]);
    Alert {
        labels,
        annotations,
        starts_at: i.started.rfc3339(),
        ends_at: ends.rfc3339(),
        generator_url: page,
    }
}

/// Agents, peak, and what Lifeline did, in one sentence or two.
pub fn description(i: &Incident) -> String {
    let mut s = format!(
        "{} agent{} held (peak {}). Lifeline sent {} signal{} to them.",
        i.agents,
        plural(i.agents),
        i.peak_words(),
        i.signals_sent,
        plural(i.signals_sent),
    );
    if i.ended.is_some() {
        s.push_str(" Every agent recovered or moved on.");
    }
    s
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::IncidentRecord;

    fn incident(peak_stranded: u32, ended: Option<Ts>) -> Incident {
        Incident::of(
            "default".into(),
            IncidentRecord {
                ended,
                peak_stranded,
                peak_degraded: 3,
                signals: 4,
                ..IncidentRecord::example()
            },
        )
    }

    fn cx() -> Context {
        Context {
            home: "default".into(),
            relabel: Some("prod".into()),
            external_url: "https://lifeline.example.com".into(),
            runbook_url: String::new(),
        }
    }

    #[test]
    fn the_cluster_label_is_the_incidents_cluster_unless_relabelled() {
        let named = |relabel: Option<&str>| Context {
            home: "home".into(),
            relabel: relabel.map(Into::into),
            ..cx()
        };
        let mut i = incident(5, None);
        i.cluster = "eu-west".into();
        let label = |cx: &Context, i: &Incident| {
            alert(
                i,
                cx,
                Ts::from_micros(0),
                Duration::from_secs(60),
                Severity::Critical,
            )
            .labels["cluster"]
                .clone()
        };
        assert_eq!(label(&named(None), &i), "eu-west");
        assert_eq!(label(&named(Some("prod")), &i), "prod");
        // Stored before clusters were named: the configured one's.
        i.cluster = "".into();
        assert_eq!(label(&named(None), &i), "home");
    }

    #[test]
    fn a_rollouts_incident_is_labelled_planned_and_says_so() {
        let mut i = incident(5, None);
        assert!(
            serde_json::to_value(alert(
                &i,
                &cx(),
                i.started,
                Duration::from_secs(300),
                Severity::Critical
            ))
            .expect("json")["labels"]
                .get("planned")
                .is_none(),
            "an unplanned incident has no planned label"
        );
        i.planned = Some(crate::domain::Plan::Rollout.into());
        i.title = "proxy-1 departed (shut down gracefully) (planned: rollout)".into();
        let v = serde_json::to_value(alert(
            &i,
            &cx(),
            i.started,
            Duration::from_secs(300),
            Severity::Critical,
        ))
        .expect("json");
        assert_eq!(v["labels"]["planned"], "rollout");
        assert!(v["annotations"]["summary"]
            .as_str()
            .is_some_and(|s| s.ends_with("(planned: rollout)")));
    }

    #[test]
    fn an_open_incident_is_an_alert_with_its_labels_and_a_horizon() {
        let i = incident(5, None);
        let now = Ts(1_700_000_060_000_000);
        let a = alert(&i, &cx(), now, Duration::from_secs(300), i.severity());
        let v = serde_json::to_value(&a).expect("json");
        assert_eq!(v["labels"]["alertname"], "LifelineIncident");
        assert_eq!(v["labels"]["cause"], "proxy_expired");
        assert_eq!(v["labels"]["resource"], "proxy-1");
        assert_eq!(v["labels"]["severity"], "critical");
        assert_eq!(v["labels"]["cluster"], "prod");
        assert_eq!(v["labels"]["lifeline_incident"], "7");
        assert_eq!(v["annotations"]["summary"], "Incident 7: proxy-1 expired");
        assert!(v["annotations"]["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("12 agents held (peak 5 stranded, 3 degraded)")));
        assert_eq!(
            v["generatorURL"],
            "https://lifeline.example.com/incidents/7"
        );
        assert_eq!(v["annotations"]["runbook_url"], v["generatorURL"]);
        assert_eq!(v["startsAt"], i.started.rfc3339());
        assert_eq!(v["endsAt"], Ts(1_700_000_360_000_000).rfc3339());
    }

    #[test]
    fn an_ended_incident_resolves_at_its_end_and_degraded_only_is_a_warning() {
        let end = Ts(1_700_000_100_000_000);
        let i = incident(0, Some(end));
        assert_eq!(i.severity(), Severity::Warning);
        let a = alert(
            &i,
            &cx(),
            Ts(1_700_000_200_000_000),
            Duration::from_secs(300),
            Severity::Warning,
        );
        assert_eq!(a.ends_at, end.rfc3339());
    }
}
