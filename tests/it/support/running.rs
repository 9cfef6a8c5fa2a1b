//! A started cluster and Lifeline: what a test drives, advances and reads.

use super::*;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::{Clock, Ts};
use lifeline::config::Config;
use lifeline::domain::Kind;
use lifeline::stats::SourcePhase;
use lifeline_sim::{SimAgent, SimCluster};
use serde_json::Value;
use tempfile::TempDir;

pub struct Running {
    pub sim: SimCluster,
    /// The counters of other Lifelines watching the simulator (replicas a
    /// test starts beside this one): its count of events sent covers theirs.
    pub other_watchers: Vec<Arc<lifeline::stats::Stats>>,
    pub agents: Vec<SimAgent>,
    pub(super) ll: Option<Lifeline>,
    pub cfg: Config,
    pub(super) tuning: Tuning,
    pub clock: Clock,
    pub(super) _dir: TempDir,
    pub http: reqwest::Client,
    /// With [`Cluster::tls`]: the test's CA and certificate files.
    pub tls: Option<TestTls>,
    pub(super) _anchor: std::sync::mpsc::Sender<()>,
}

impl Running {
    pub fn ll(&self) -> &Lifeline {
        self.ll.as_ref().expect("lifeline running")
    }

    /// Waits until Lifeline is ready, every auth server's health is known
    /// and every simulated agent is connected.
    pub async fn ready(&self) {
        real_timeout(REAL_WAIT, self.ll().fleet.wait_ready())
            .await
            .expect("Lifeline ready in time")
            .expect("fleet alive");
        // On PostgreSQL a replica follows until it takes the lease, and
        // only the leader writes history: what a test sends before then
        // would be left to a leader that never comes.
        self.eventually("this replica leads", || async { self.ll().hub.leads() })
            .await;
        // Every auth server has reported its first health.
        self.eventually("auth health known", || async {
            let auths = self.ok("/api/v1/auth-servers").await;
            auths["items"].as_array().is_some_and(|a| {
                a.iter()
                    .all(|x| x["health"] != "UNKNOWN" && x["health"] != "NEVER_REACHED")
            })
        })
        .await;
        // Every simulated agent holds its signal stream open.
        let n = self.agents.len();
        self.eventually("every simulated agent connected", || async {
            self.ll().hub.connected() == n && self.agents.iter().all(|a| a.is_connected())
        })
        .await;
    }

    /// Waits until Lifeline has consumed every event the simulator sent, and
    /// the fleet has applied them (a read is a barrier: it runs after every
    /// earlier command, with due timers fired).
    pub async fn quiesce(&self) {
        let ll = self.ll();
        let consumed = || {
            std::iter::once(&ll.stats)
                .chain(&self.other_watchers)
                .map(|s| s.session_events.load(Ordering::SeqCst))
                .sum::<u64>()
        };
        let caught_up = real_timeout(REAL_WAIT, async {
            // Nothing more arrives while the stream is down.
            while ll.fleet.readiness().ready
                && (!self.sim.stream_caught_up() || consumed() < self.sim.delivered())
            {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            caught_up.is_some(),
            "Lifeline consumed {} of the {} events the simulator sent within {REAL_WAIT:?}",
            consumed(),
            self.sim.delivered()
        );
        // A session whose stream is open moves on real sockets (INIT, the
        // listing): the clock must not outrun it.
        let resynced = real_timeout(REAL_WAIT, async {
            while ll.stats.source_phase() == SourcePhase::Resyncing {
                real_sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        assert!(
            resynced.is_some(),
            "the cluster source was still resyncing after {REAL_WAIT:?}"
        );
        bounded("the fleet to settle", ll.fleet.settled())
            .await
            .expect("fleet alive");
    }

    /// Moves virtual time forward by `d`, in small steps so heartbeats and
    /// expiries happen in order, letting the pipeline settle after each.
    pub async fn advance(&self, d: Duration) {
        let step = Duration::from_millis(250);
        let mut left = d;
        while !left.is_zero() {
            let s = left.min(step);
            tokio::time::advance(s).await;
            self.quiesce().await;
            left -= s;
        }
    }

    /// The named proxies stop heartbeating; returns once the last of them
    /// has expired (virtual time) and what that caused has crossed the
    /// sockets.
    pub async fn stop_proxies(&self, names: &[&str]) {
        let mut last = self.clock.now();
        for p in names {
            self.sim.pause_heartbeats(p).await;
            last = last.max(self.expires(Kind::Proxy, p).await);
        }
        self.advance_to(last).await;
        self.quiesce().await;
    }

    /// In a [`Cluster::six_legacy`]: stops proxy-1 and proxy-2, so
    /// agent-00001 and agent-00005 lose every live tunnel; the rest keep one.
    pub async fn strand_two(&self) {
        self.stop_proxies(&["proxy-1", "proxy-2"]).await;
    }

    /// An agent's state as the API reports it.
    pub async fn state(&self, agent: &str) -> String {
        self.ok(&format!("/api/v1/agents/{agent}")).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// In a [`Cluster::storm`]: both proxies expire together, then 5 s pass.
    pub async fn strand_everyone(&self) {
        let e = self.expires(Kind::Proxy, "proxy-1").await;
        self.advance_to(e).await;
        self.advance(Duration::from_secs(5)).await;
    }

    /// Moves virtual time until just past wall time `t` (1 ms: tokio's timer
    /// granularity), landing exactly there.
    pub async fn advance_to(&self, t: Ts) {
        let target = t.saturating_add(Duration::from_millis(1));
        let now = self.clock.now();
        let gap = target.since(now);
        if gap > Duration::from_millis(250) {
            self.advance(gap - Duration::from_millis(250)).await;
        }
        let rest = target.since(self.clock.now());
        tokio::time::advance(rest).await;
        self.quiesce().await;
    }

    /// Advances virtual time in steps until `cond` holds (at most `max`).
    pub async fn advance_until<F, Fut>(&self, what: &str, max: Duration, mut cond: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut spent = Duration::ZERO;
        while !cond().await {
            assert!(
                spent < max,
                "not true within {max:?} of virtual time: {what}"
            );
            self.advance(Duration::from_millis(250)).await;
            spent += Duration::from_millis(250);
        }
    }

    /// Polls `cond` until true; panics after a real-time bound. Between
    /// polls it waits for the next real-time tick, never blocking a thread.
    pub async fn eventually<F, Fut>(&self, what: &str, mut cond: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = std::time::Instant::now() + REAL_WAIT;
        loop {
            if cond().await {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not true within {REAL_WAIT:?}: {what}"
            );
            real_sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until every write so far is committed.
    pub async fn flush(&self) {
        bounded("every write to commit", self.ll().fleet.flush())
            .await
            .expect("fleet alive");
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.get_text(path).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A GET that sees everything the fleet has applied so far: it first
    /// lets the fleet settle, which publishes the read model the dashboard
    /// and `/metrics` serve (on its own the fleet publishes at most every
    /// 250 ms of its clock, and a paused test clock may not get there).
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        bounded("the fleet to settle", self.ll().fleet.settled())
            .await
            .expect("fleet alive");
        let url = format!("{}{}", self.ll().base_url(), path);
        let resp = bounded(&format!("GET {path}"), self.http.get(&url).send())
            .await
            .expect("HTTP request");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    /// [`Running::get_text`] with a bearer token.
    pub async fn get_text_as(&self, path: &str, token: &str) -> (u16, String) {
        let url = format!("{}{}", self.ll().base_url(), path);
        let resp = bounded(
            &format!("GET {path}"),
            self.http.get(&url).bearer_auth(token).send(),
        )
        .await
        .expect("HTTP request");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    pub async fn ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path} → {status}: {body}");
        body
    }

    /// POST as [`ADMIN`].
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(ADMIN), Some(body))
            .await
    }

    /// Any method, with a bearer token (or none) and a JSON body (or none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{}", self.ll().base_url(), path);
        let mut req = self.http.request(method, &url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = bounded("an HTTP call", req.send())
            .await
            .expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn agent(&self, name: &str) -> &SimAgent {
        self.agents
            .iter()
            .find(|a| a.name == name)
            .expect("simulated agent exists")
    }

    pub async fn summary(&self) -> Value {
        self.ok("/api/v1/summary").await
    }

    /// Names of agents in `state`, sorted.
    pub async fn agents_in(&self, state: &str) -> Vec<String> {
        let body = self
            .ok(&format!("/api/v1/agents?state={state}&limit=1000"))
            .await;
        names(&body["items"])
    }

    /// The announced expiry of a simulated server.
    pub async fn expires(&self, kind: Kind, name: &str) -> Ts {
        let s = self
            .sim
            .get_server(kind, name)
            .await
            .expect("server exists");
        let e = s.expires.expect("has expires");
        Ts(e.seconds * 1_000_000 + i64::from(e.nanos / 1000))
    }

    pub async fn stop_lifeline(&mut self) {
        if let Some(ll) = self.ll.take() {
            ll.shutdown().await;
        }
    }

    /// Starts a new Lifeline on the same database.
    pub async fn restart_lifeline(&mut self) {
        self.stop_lifeline().await;
        let ll = Lifeline::start_tuned(&self.cfg, self.clock, self.tuning.clone())
            .await
            .expect("lifeline restarts");
        self.ll = Some(ll);
    }

    pub async fn shutdown(mut self) {
        for a in &self.agents {
            a.stop();
        }
        self.stop_lifeline().await;
        self.sim.shutdown();
    }
}
