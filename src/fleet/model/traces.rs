//! One trace per failure: agents stranded by the same (cause, resource,
//! since) join one root span, which their signals and episode closes
//! continue.

use std::collections::{BTreeMap, BTreeSet};

use tracing::info_span;

use super::Model;
use crate::clock::Ts;
use crate::domain::{AgentState, CauseKind};
use crate::telemetry::propagate::{self, TraceRef};

/// Failure traces remembered for joining.
const MAX_FAILURE_TRACES: usize = 1024;

impl Model {
    /// One trace per failure: a root span for each (cause, resource, since)
    /// among this pass's new non-healthy states (from `first` on), a `classify` child naming
    /// how many agents it took and why, and the trace handed to each change
    /// (signals continue it) and to the agent (its episode's close ends it).
    pub(super) fn trace_failures(&mut self, first: usize, now: Ts) {
        let mut groups: BTreeMap<(Option<CauseKind>, String, Ts), Vec<usize>> = BTreeMap::new();
        for (i, c) in self.out.changes.iter().enumerate().skip(first) {
            if c.to == AgentState::Healthy {
                continue;
            }
            let key = (
                c.cause,
                c.cause_resource.clone().unwrap_or_default(),
                c.since,
            );
            groups.entry(key).or_default().push(i);
        }
        if self.failures.len() + groups.len() > MAX_FAILURE_TRACES {
            self.failures.clear();
        }
        for (key, idx) in groups {
            let stranded = idx
                .iter()
                .filter(|&&i| self.out.changes[i].to == AgentState::Stranded)
                .count();
            let reasons: BTreeSet<String> = idx
                .iter()
                .map(|&i| self.out.changes[i].reasons.join())
                .collect();
            let reasons = reasons.into_iter().collect::<Vec<_>>().join(";");
            let cause = key.0.map_or("unknown", CauseKind::as_str);
            let (resource, since) = (key.1.as_str(), key.2);
            let root = match self.failures.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let span = info_span!(
                        parent: None,
                        "failure",
                        otel.name = %format!("{cause} {resource}"),
                        cause,
                        resource,
                        since = %since,
                        agents = idx.len(),
                        stranded,
                        reasons = %reasons,
                        detection_ms = now.since(since).as_secs_f64() * 1e3,
                    );
                    let Some(t) = TraceRef::of(&span) else {
                        continue;
                    };
                    self.failures.insert(key.clone(), t.clone());
                    t
                }
            };
            let first = idx
                .first()
                .map(|&i| self.out.changes[i].agent.as_str())
                .unwrap_or("");
            let _classify = propagate::child(Some(&root), || {
                info_span!(
                    parent: None,
                    "classify",
                    cause,
                    resource,
                    agents = idx.len(),
                    stranded,
                    degraded = idx.len() - stranded,
                    reasons = %reasons,
                    first_agent = %first,
                )
            });
            for &i in &idx {
                let c = &mut self.out.changes[i];
                c.trace = Some(root.clone());
                if let Some(a) = self.agents.get_mut(&c.agent) {
                    a.trace = Some(root.clone());
                }
            }
        }
    }
}
