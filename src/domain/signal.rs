//! Audited control signals: their kinds and outcomes, one name each from
//! the wire to SQLite and JSON.

use super::named_enum;

named_enum! {
    "snake_case";
    /// An audited signal's kind (discovery is not audited). The discriminants
    /// index `Stats::signals`.
    pub enum SignalKind {
        Reconnect = 0,
        CloseTunnel = 1,
    }
}

named_enum! {
    "snake_case";
    /// Where an audited signal stands: `pending` until a stream takes it,
    /// `delivered` once written to the agent's stream, then one final outcome.
    pub enum Outcome {
        Pending,
        Delivered,
        /// The agent acknowledged it and did what it asked.
        Acked,
        /// The agent acknowledged it and could not do it.
        Failed,
        /// The agent's peer did not try it, and said why: a dry run, a
        /// cooldown, a restart already under way, or a target it could not
        /// prove is the agent. Never counted as a failure.
        Refused,
        /// No stream to the agent, or the stream closed before it was written.
        Undeliverable,
        /// No acknowledgement in time.
        Timeout,
    }
}

impl SignalKind {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for o in <Outcome as strum::VariantArray>::VARIANTS {
            assert_eq!(o.as_str().parse::<Outcome>().ok(), Some(*o));
        }
        assert_eq!(Outcome::Undeliverable.as_str(), "undeliverable");
        assert_eq!(SignalKind::CloseTunnel.as_str(), "close_tunnel");
        assert!("sent".parse::<Outcome>().is_err());
    }
}
