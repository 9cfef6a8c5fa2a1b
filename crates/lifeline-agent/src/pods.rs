//! `restart = "kubernetes"`: speaking for every pod of one StatefulSet,
//! a session per pod under its Teleport host ID, restarted by eviction
//! (`kube`), started and ended as pods come, go and change identity.
//!
//! Owns the set of pods spoken for; the Kubernetes calls are `kube`'s,
//! the streams `session`'s, the restart `restart`'s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use crate::config::{AgentConfig, Restart};
use crate::kube::{KubeError, Members, PodTarget};
use crate::restart::Restarter;

/// How often the StatefulSet's pods are listed again (scaled up or down).
const MEMBERS_EVERY: Duration = Duration::from_secs(30);

/// Speaks for every pod of the StatefulSet until `stop`: lists its pods
/// now and every [`MEMBERS_EVERY`], starts a session for each pod whose
/// host ID it can read, ends the session of a pod that is gone, and
/// starts again under the new ID a pod whose state Secret changed.
pub async fn run(cfg: AgentConfig, stop: CancellationToken) -> Result<(), KubeError> {
    let Restart::Kubernetes(target) = &cfg.restart else {
        return Err(KubeError::Client("restart is not \"kubernetes\"".into()));
    };
    let members = Arc::new(Members::connect(target).await?);
    info!(
        statefulset = %target.statefulset,
        namespace = %members.namespace,
        lifeline = ?cfg.lifeline,
        dry_run = cfg.dry_run,
        "lifeline-agent started for a StatefulSet's pods"
    );
    let cfg = Arc::new(cfg);
    let mut held: BTreeMap<String, (String, CancellationToken)> = BTreeMap::new();
    // Why a pod is not spoken for, said once until it changes.
    let mut why_not: BTreeMap<String, String> = BTreeMap::new();
    loop {
        match members.pods().await {
            Ok(pods) => {
                held.retain(|pod, (host, token)| {
                    let keep = pods.contains(pod);
                    if !keep {
                        info!(pod, host, "pod gone from the StatefulSet: its streams end");
                        token.cancel();
                    }
                    keep
                });
                for pod in pods {
                    let id = members.host_id(&pod).await;
                    if let Some((host, token)) = held.get(&pod) {
                        // The Secret is read again each round: a pod whose
                        // host ID changed (its state was reset) is spoken
                        // for under the new one, never the old.
                        match &id {
                            Ok(now) if now != host => {
                                info!(pod, was = %host, now = %now, "pod's host ID changed: its streams end and open again under the new one");
                                token.cancel();
                                held.remove(&pod);
                            }
                            _ => continue,
                        }
                    }
                    match id {
                        Ok(host) => {
                            why_not.remove(&pod);
                            let token = stop.child_token();
                            let mut one = (*cfg).clone();
                            one.host_id = host.clone();
                            let target = PodTarget::new(members.clone(), pod.clone(), host.clone());
                            let restarter = Arc::new(Restarter::for_pod(&one, target));
                            info!(pod, host, "speaking for pod");
                            let span = info_span!("agent.pod", pod = %pod, host = %host);
                            tokio::spawn(
                                crate::session::hold_all(Arc::new(one), restarter, token.clone())
                                    .instrument(span),
                            );
                            held.insert(pod, (host, token));
                        }
                        Err(e) => {
                            let e = e.to_string();
                            if why_not.get(&pod) != Some(&e) {
                                warn!(pod, error = %e, "cannot speak for pod yet");
                                why_not.insert(pod, e);
                            }
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "listing the StatefulSet's pods failed; will retry"),
        }
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = tokio::time::sleep(MEMBERS_EVERY) => {}
        }
    }
}
