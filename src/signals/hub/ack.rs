//! An ack from an agent's stream: matched to the signal it answers (only
//! from the agent it was sent to), its outcome counted, traced and
//! written to the audit; a restart's end recorded for the cap and the
//! pause.
//!
//! Owns: what an ack does. Must not touch: the stream it came on.

use tracing::{debug, info, info_span};

use super::{Hub, MAX_ACK_DETAIL};
use crate::clock::dur_micros;
use crate::domain::{text, Outcome};
use crate::proto::v1 as pb;
use crate::stats::{SignalOutcome, Stats};
use crate::store::signals::SignalUpdate;
use crate::telemetry::propagate;

impl Hub {
    pub(super) fn ack(&self, agent: &str, a: pb::SignalAck) {
        let id = a.signal_id as i64;
        let Some(f) = self.flights.take(id, agent) else {
            Stats::inc(&self.rt.stats.agent_messages_rejected);
            debug!(
                agent,
                id, "ack for a signal not awaiting one (late, duplicate or foreign)"
            );
            return;
        };
        // A refusal says the peer did not try: it is its own outcome, and
        // says nothing of whether restarts help (see `restart_ended`).
        let (outcome, counted) = match (a.ok, a.refused) {
            (true, _) => (Outcome::Acked, SignalOutcome::Acked),
            (false, true) => (Outcome::Refused, SignalOutcome::Refused),
            (false, false) => (Outcome::Failed, SignalOutcome::Failed),
        };
        if f.restart {
            self.restart_ended(match outcome {
                Outcome::Acked => Some(true),
                Outcome::Refused => None,
                _ => Some(false),
            });
        }
        let now = self.rt.clock.now();
        let latency = now.since(f.created);
        self.rt.stats.signal(f.kind, counted);
        self.rt.stats.hist.signal[f.kind as usize].record(latency.as_secs_f64());
        // The agent's words: bounded and cleaned before they reach the
        // audit, a span or a log line.
        let detail = text::bounded(&a.detail, MAX_ACK_DETAIL);
        let _ack = propagate::child(f.trace.as_ref(), || {
            info_span!(
                parent: None,
                "signal.ack",
                otel.name = %format!("ack {}", f.kind.as_str()),
                signal.id = id,
                agent,
                outcome = outcome.as_str(),
                latency_ms = latency.as_secs_f64() * 1e3,
                detail = %text::excerpt(&detail),
            )
        });
        if outcome == Outcome::Failed {
            info!(agent, id, detail = %text::excerpt(&detail), "agent could not carry out a signal");
        } else if outcome == Outcome::Refused {
            info!(agent, id, detail = %text::excerpt(&detail), "agent's peer refused a signal without trying it");
        }
        self.update(SignalUpdate::Outcome {
            id,
            at: self.audit_now(),
            outcome,
            detail,
            acked: true,
            latency_us: Some(dur_micros(latency)),
        });
    }
}
