//! What history rows and episodes record, one name each from the fleet to
//! SQLite and JSON.

use super::named_enum;

named_enum! {
    "snake_case";
    pub enum HistoryEvent {
        /// First seen.
        Added,
        /// A PUT that moved the expiry.
        Heartbeat,
        /// A PUT with the same expiry.
        Update,
        Delete,
        Expired,
        /// An input refused by validation.
        Rejected,
        /// The source cannot watch this kind.
        RejectedKind,
        /// A new watcher generation listed the kind.
        Resync,
        /// The watch stream was lost: the data is stale.
        Stale,
        /// An auth server's health changed.
        Health,
        /// An agent opened its signal stream.
        Connected,
        /// An agent's signal stream closed.
        Disconnected,
        /// History rows were dropped (the database refused writes for
        /// long): the history has a gap here, and says how large.
        Gap,
    }
}

named_enum! {
    "snake_case";
    /// What a history row is about: a resource of one kind, the watcher
    /// itself, or an input whose kind Lifeline does not know.
    pub enum Subject {
        Proxy,
        AuthServer,
        Agent,
        TunnelConnection,
        /// The watch stream as a whole (it was lost).
        Watcher,
        /// A rejected input naming no kind Lifeline knows.
        Unknown,
        /// Lifeline's own store (a gap in the history it keeps).
        Store,
    }
}

impl From<super::Kind> for Subject {
    fn from(k: super::Kind) -> Subject {
        match k {
            super::Kind::Proxy => Subject::Proxy,
            super::Kind::AuthServer => Subject::AuthServer,
            super::Kind::Agent => Subject::Agent,
            super::Kind::TunnelConnection => Subject::TunnelConnection,
        }
    }
}

named_enum! {
    "snake_case";
    /// Why a stranded or degraded episode ended.
    pub enum EndReason {
        /// The agent turned healthy.
        Recovered,
        /// It moved between degraded and stranded: a new episode began.
        StateChanged,
        /// The cluster deleted the agent.
        AgentDeleted,
        /// At start, the agent was no longer known.
        AgentUnknown,
        /// A new leader took over and found the agent healthy: the old
        /// leader's episode ends when the new one saw it end.
        LeaderChange,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Kind;

    #[test]
    fn a_resource_kind_is_the_same_name_as_a_subject() {
        for k in Kind::ALL {
            assert_eq!(Subject::from(k).as_str(), k.as_str());
        }
    }
}
