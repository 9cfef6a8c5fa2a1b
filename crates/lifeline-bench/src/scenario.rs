//! The scenarios `lifeline-bench` runs, with their options as the command
//! line takes them.

use std::path::PathBuf;
use std::time::Duration;

use super::{resync, signals, soak};
use lifeline::config::SourceKind;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum Scenario {
    /// Events/s from a ClusterEvents stream through the model into SQLite,
    /// against the raw batched-insert rate of the same rows.
    Ingest {
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        #[arg(long, default_value_t = 1_000)]
        proxies: usize,
        /// Heartbeat events to stream.
        #[arg(long, default_value_t = 500_000)]
        events: usize,
        /// Skip the trace-export comparison (off vs on, to a local OTLP
        /// receiver), which streams the events twice per round.
        #[arg(long)]
        no_export: bool,
        /// Rounds of the export comparison (an off and an on leg each).
        #[arg(long, default_value_t = 5)]
        export_rounds: usize,
        /// Rounds of the source comparison (a lifeline-source and a
        /// teleport-source leg each); 0 skips it.
        #[arg(long, default_value_t = 3)]
        source_rounds: usize,
        /// Also run the pipeline and the raw insert with the store on this
        /// PostgreSQL server (`postgres://user@host:port/db`; a database
        /// per leg is created on it and dropped after, so the user needs
        /// CREATEDB).
        #[arg(long, env = "LIFELINE_BENCH_POSTGRES_URL")]
        postgres: Option<String>,
        /// Rounds of the engine comparison with `--postgres` (a SQLite
        /// and a PostgreSQL leg each).
        #[arg(long, default_value_t = 3)]
        postgres_rounds: usize,
    },
    /// INIT + paged list + classify of a large cluster.
    Resync {
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        #[arg(long, default_value_t = 1_000)]
        proxies: usize,
        #[arg(long, default_value_t = 2)]
        tunnels_per_agent: usize,
        #[arg(long, default_value_t = 5_000)]
        page_size: u32,
        /// Rounds of the source comparison (a lifeline-source and a
        /// teleport-source leg each); 0 skips it.
        #[arg(long, default_value_t = 3)]
        source_rounds: usize,
        /// The source of the first leg, whose memory per agent is
        /// reported: `teleport` measures what a real cluster's agents cost
        /// (each carries its services, hostname and tunnel labels).
        #[arg(long, value_enum, default_value_t = SourceKind::Lifeline)]
        source: SourceKind,
    },
    /// Cold resyncs at several fleet sizes in one run: time per agent
    /// against the smallest size's.
    ResyncScale(resync::Scale),
    /// How soon an incident is told (webhook `incident.opened`, first
    /// Alertmanager post; receivers in-process), and ingest's rate with a
    /// webhook and an Alertmanager configured against without.
    Notify {
        /// Incidents, each a proxy that stops heartbeating.
        #[arg(long, default_value_t = 100)]
        incidents: usize,
        /// The rate they open at.
        #[arg(long, default_value_t = 3600)]
        per_hour: u32,
        /// Agents of the ingest comparison.
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        /// Heartbeat events per ingest leg.
        #[arg(long, default_value_t = 500_000)]
        events: usize,
        /// Rounds of the ingest comparison (an off and an on leg each).
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Agents of the latency leg's fleet (spread over its proxies).
        #[arg(long, default_value_t = 100_000)]
        fleet: usize,
        /// Webhooks configured, each taking every event.
        #[arg(long, default_value_t = 5)]
        webhooks: usize,
        /// Of them, how many go to a receiver that never answers.
        #[arg(long, default_value_t = 1)]
        hung: usize,
    },
    /// Latency from an expiry instant to the agents it strands being flagged.
    Detect {
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        #[arg(long, default_value_t = 1_000)]
        proxies: usize,
        /// Consecutive proxies that expire (agents on two of them strand).
        #[arg(long, default_value_t = 100)]
        expiring: usize,
        /// Time between consecutive expiries.
        #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
        spacing: Duration,
    },
    /// Connected agents (in a child process); latency from a proxy heartbeat
    /// to its Discovery reaching every agent; server RSS per agent.
    Fanout {
        #[arg(long, default_value_t = 10_000)]
        agents: usize,
        /// Heartbeats measured (each of a different proxy, 500 ms apart).
        #[arg(long, default_value_t = 20)]
        rounds: usize,
        #[arg(long, default_value_t = 100)]
        per_connection: usize,
    },
    /// Discovery bytes and messages over a simulated hour: delta vs
    /// full_discovery. Needs a build with `--features virtual-time` (an hour
    /// on tokio's paused clock).
    DiscoveryTraffic {
        #[arg(long, default_value_t = 10_000)]
        agents: usize,
        #[arg(long, default_value_t = 100)]
        proxies: usize,
        #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
        ttl: Duration,
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        duration: Duration,
        /// Real agent streams measured (the rest are the same sequence).
        #[arg(long, default_value_t = 10)]
        streams: usize,
    },
    /// Latency from `POST /api/v1/agents/{name}/reconnect` to the agent's ack.
    Reconnect {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        #[arg(long, default_value_t = 1_000)]
        requests: usize,
    },
    /// Expiry of two proxies → every stranded agent back on a live tunnel,
    /// with simulated agents and automatic reconnects.
    Recovery {
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        /// Share of agents that ignore TTLs (only Lifeline's signal moves them).
        #[arg(long, default_value_t = 1.0)]
        legacy_share: f64,
        /// `teleport`: the cluster is Teleport's (proxy peering), its agents
        /// hold no signal stream, and a sidecar beside each restarts it.
        #[arg(long, value_enum, default_value = "lifeline")]
        source: lifeline::config::SourceKind,
        /// With `--source teleport`: how long a simulated restart takes.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
        restart: Duration,
        /// With `--source teleport`: `signals.max_restarts_in_flight.cap`.
        #[arg(long, default_value_t = 20)]
        restart_cap: usize,
    },
    /// Server time to render the overview and the stranded agents page of
    /// a large fleet, and the overview's download size.
    Ui {
        #[arg(long, default_value_t = 100_000)]
        agents: usize,
        #[arg(long, default_value_t = 1_000)]
        proxies: usize,
        /// Consecutive proxies that expire (agents on two of them strand).
        #[arg(long, default_value_t = 20)]
        expiring: usize,
        /// Requests measured per page.
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// Days of past incidents written before Lifeline starts.
        #[arg(long, default_value_t = 30)]
        history_days: u64,
        /// Past incidents over those days.
        #[arg(long, default_value_t = 3000)]
        incidents: usize,
        /// Agents each past incident held.
        #[arg(long, default_value_t = 40)]
        incident_agents: usize,
        /// Also on PostgreSQL: a server URL whose user may create databases
        /// (each leg gets a fresh one, dropped after).
        #[arg(long)]
        postgres: Option<String>,
    },
    /// Several `lifeline serve` replicas on one PostgreSQL database: the
    /// leader killed during an incident (SIGKILL → new lease → its first
    /// automatic signal → all recovered; audit and episodes checked),
    /// manual reconnects across replicas, and a leader cut off from the
    /// database.
    Failover {
        /// The PostgreSQL server (`postgres://user@host:port/db`); a
        /// database is created on it for the run and dropped after.
        #[arg(long, env = "LIFELINE_BENCH_POSTGRES_URL")]
        postgres: String,
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        #[arg(long, default_value_t = 1_000)]
        agents: usize,
        /// `storage.leader_lease` of every replica.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        lease: Duration,
        /// Manual reconnects measured across replicas.
        #[arg(long, default_value_t = 500)]
        requests: usize,
    },
    /// Lifeline for a long time (30 minutes by default) under the demo's
    /// chaos, the cluster and its agents in another process: resident
    /// memory sampled against the memory budget, and whether it levels off.
    Soak(soak::Soak),
    /// (internal) The cluster, agents and chaos of `soak`, in their own
    /// process. Prints `listening <uri>`; `lifeline <addr>` on stdin
    /// connects the agents and starts the chaos (`agents <n>`); EOF stops
    /// it.
    #[command(hide = true)]
    SoakCluster {
        #[arg(long)]
        agents: usize,
        #[arg(long)]
        proxies: usize,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Duration,
        #[arg(long, value_parser = humantime::parse_duration)]
        chaos_period: Duration,
    },
    /// (internal) The simulated cluster of `resync`, in its own process so
    /// that Lifeline's memory is measured alone. Prints `listening <uri>`;
    /// `kill-streams` on stdin ends every watch stream; EOF stops it.
    #[command(hide = true)]
    Cluster {
        #[arg(long)]
        agents: usize,
        #[arg(long)]
        proxies: usize,
        #[arg(long)]
        tunnels_per_agent: usize,
        /// Play Teleport's Auth API over mutual TLS, writing the identity
        /// file Lifeline needs here.
        #[arg(long)]
        teleport_identity: Option<PathBuf>,
    },
    /// (internal) The agents process of `fanout` and `reconnect`.
    #[command(hide = true)]
    Agents {
        #[arg(long)]
        lifeline: std::net::SocketAddr,
        #[arg(long)]
        agents: usize,
        #[arg(long, default_value_t = 100)]
        per_connection: usize,
        /// The join token, from the parent benchmark's environment.
        #[arg(long, env = signals::JOIN_TOKEN_ENV, hide_env_values = true)]
        join_token: String,
    },
}

impl Scenario {
    /// The ingest scenario compares trace export off and on: `main` installs
    /// the OTLP layer (switched off) before it runs.
    pub fn wants_export(&self) -> bool {
        matches!(
            self,
            Scenario::Ingest {
                no_export: false,
                ..
            }
        )
    }
}
