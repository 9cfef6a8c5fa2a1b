//! Audited control signals: their kinds and outcomes, one name each from
//! the wire to SQLite and JSON.

use serde::{Deserialize, Serialize};

/// An audited signal's kind (discovery is not audited). The discriminants
/// index `Stats::signals`.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    sqlx::Type,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum SignalKind {
    Reconnect = 0,
    CloseTunnel = 1,
}

/// Where an audited signal stands: `pending` until a stream takes it,
/// `delivered` once written to the agent's stream, then one final outcome.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    sqlx::Type,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum Outcome {
    Pending,
    Delivered,
    /// The agent acknowledged it and did what it asked.
    Acked,
    /// The agent acknowledged it and could not do it.
    Failed,
    /// No stream to the agent, or the stream closed before it was written.
    Undeliverable,
    /// No acknowledgement in time.
    Timeout,
}

impl SignalKind {
    pub const ALL: [SignalKind; 2] = [SignalKind::Reconnect, SignalKind::CloseTunnel];

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

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
