//! What is planned: maintenance windows an operator declares, the targets
//! they name, and the rule that says which stranding a window explains.
//! A stranding so explained carries a [`Plan`]: it is shown, not acted on
//! and not notified.
//!
//! Pure values and rules; the store keeps the windows, the fleet applies
//! the rule, the API validates what operators send with [`Target::parse`].

use crate::clock::Ts;
use crate::domain::{Cause, CauseKind};

use super::named_enum;

/// The most targets one window names.
pub const MAX_TARGETS: usize = 100;
/// The longest name a target's pattern may need (a DNS name's).
pub const MAX_PATTERN: usize = 253;
/// The longest cluster pattern a target may start with (a cluster name's
/// length).
pub const MAX_CLUSTER_PATTERN: usize = 63;
/// The longest target, in characters: the longest cluster pattern, `/`,
/// the longest kind, `/`, and the longest name (the schema's
/// `maxLength`).
pub const MAX_TARGET: usize = MAX_CLUSTER_PATTERN + "/auth_server/".len() + MAX_PATTERN;
/// The longest reason, in characters.
pub const MAX_REASON: usize = 1000;

named_enum! {
    "snake_case";
    /// What a window's target names.
    pub enum TargetKind {
        Proxy,
        AuthServer,
        Agent,
    }
}

/// One target: a kind and a name or glob (`*`, `?`, `[a-z]`), written
/// `proxy/proxy-2`, `auth_server/auth-*`, `agent/node-1?`, in every
/// cluster; or after a cluster's name or glob (`*`, `?`), in those
/// clusters only: `prod-eu/proxy/proxy-2`, `prod-*/agent/db-*`.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: TargetKind,
    text: String,
    /// The clusters it names; `None`: every cluster.
    cluster: Option<glob::Pattern>,
    pattern: glob::Pattern,
}

impl PartialEq for Target {
    fn eq(&self, o: &Target) -> bool {
        self.kind == o.kind && self.text == o.text
    }
}

impl Eq for Target {}

/// Why a target does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("a target is written kind/name (proxy/…, auth_server/…, agent/…)")]
    NoKind,
    #[error("unknown target kind {0:?}: one of proxy, auth_server, agent")]
    Kind(String),
    #[error("a target's name is empty")]
    Empty,
    #[error("a target is longer than {MAX_TARGET} characters")]
    TooLong,
    #[error("a target's name {0}")]
    Unsafe(String),
    #[error("a target's glob does not parse: {0}")]
    Glob(String),
    #[error("a target's cluster is 1 to {MAX_CLUSTER_PATTERN} letters, digits, '-', '_', '.', '*' and '?' before its kind (prod-eu/proxy/…)")]
    Cluster,
}

/// A target as the API's schema states it (`pattern`): optionally a
/// cluster's name or glob and `/`, then a kind, `/`, and a name of safe
/// characters where `[` and `]` only open and close a class
/// (`[a-z]`, `[!0-9]`). [`Target::parse`] accepts exactly this (and a name
/// of at most [`MAX_PATTERN`] characters).
pub const TARGET_PATTERN: &str = r"^([A-Za-z0-9._*?-]{1,63}/)?(proxy|auth_server|agent)/([^\[\]\u0000-\u001f\u007f-\u009f\u2028\u2029]|\[(![^\[\]\u0000-\u001f\u007f-\u009f\u2028\u2029]|[^!\[\]\u0000-\u001f\u007f-\u009f\u2028\u2029])[^\[\]\u0000-\u001f\u007f-\u009f\u2028\u2029]*\])+$";

/// Whether a name is written as [`TARGET_PATTERN`] says (after its kind).
fn glob_problem(name: &str) -> Option<String> {
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ']' => return Some("has a ] that closes no [".into()),
            '[' => {
                let mut class = String::new();
                loop {
                    match chars.next() {
                        None => return Some("has a [ that is never closed".into()),
                        Some('[') => return Some("has a [ inside a [class]".into()),
                        Some(']') => break,
                        Some(c) => class.push(c),
                    }
                }
                if class.is_empty() || class == "!" {
                    return Some("has an empty [class]".into());
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether a name is only `*`: it matches every name of its kind.
fn matches_everything(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c == '*')
}

/// A run of `*` as one `*`: names hold no path, and the glob crate reads
/// `**` as a path's wildcard (and refuses it inside a name).
fn one_star(s: &str) -> String {
    let mut glob = String::with_capacity(s.len());
    for c in s.chars() {
        if !(c == '*' && glob.ends_with('*')) {
            glob.push(c);
        }
    }
    glob
}

impl Target {
    pub fn parse(s: &str) -> Result<Target, TargetError> {
        let (first, rest) = s.split_once('/').ok_or(TargetError::NoKind)?;
        // `kind/name`, or `cluster/kind/name` when the first part is no
        // kind and a kind follows it.
        let (cluster, kind, name) = match first.parse::<TargetKind>() {
            Ok(kind) => (None, kind, rest),
            Err(_) => match rest.split_once('/') {
                Some((kind, name)) => {
                    let kind = kind
                        .parse::<TargetKind>()
                        .map_err(|_| TargetError::Kind(super::text::bounded(kind, 64)))?;
                    (Some(first), kind, name)
                }
                None => return Err(TargetError::Kind(super::text::bounded(first, 64))),
            },
        };
        let cluster = match cluster {
            None => None,
            Some(c) => {
                let fits = (1..=MAX_CLUSTER_PATTERN).contains(&c.len())
                    && c.chars().all(|c| {
                        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*' | '?')
                    });
                if !fits {
                    return Err(TargetError::Cluster);
                }
                Some(glob::Pattern::new(&one_star(c)).map_err(|_| TargetError::Cluster)?)
            }
        };
        if name.is_empty() {
            return Err(TargetError::Empty);
        }
        if s.chars().count() > MAX_TARGET {
            return Err(TargetError::TooLong);
        }
        if let Some(p) = super::text::name_problem(name) {
            return Err(TargetError::Unsafe(p));
        }
        if let Some(p) = glob_problem(name) {
            return Err(TargetError::Glob(p));
        }
        let pattern = glob::Pattern::new(&one_star(name))
            .map_err(|e| TargetError::Glob(e.msg.to_string()))?;
        Ok(Target {
            kind,
            text: s.to_string(),
            cluster,
            pattern,
        })
    }

    /// It names every resource of its kind (`agent/*`, in one cluster or
    /// all): a window with it needs `all`.
    pub fn is_everything(&self) -> bool {
        matches_everything(self.name())
    }

    /// Whether it names resources of `cluster`: a target without a
    /// cluster names every cluster's.
    pub fn in_cluster(&self, cluster: &super::ClusterName) -> bool {
        self.cluster
            .as_ref()
            .is_none_or(|p| p.matches(cluster.as_str()))
    }

    /// As written: `proxy/proxy-2`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The name or glob after the kind: `proxy-2`, `db-*`.
    pub fn name(&self) -> &str {
        fn after_first(s: &str) -> &str {
            s.split_once('/').map_or("", |(_, n)| n)
        }
        let rest = after_first(&self.text);
        if self.cluster.is_some() {
            after_first(rest)
        } else {
            rest
        }
    }

    /// Whether its name is a glob (`*`, `?`, `[class]`) rather than one
    /// name.
    pub fn is_glob(&self) -> bool {
        self.name().contains(['*', '?', '['])
    }

    /// Its name as an anchored RE2 regex body (Alertmanager's matchers):
    /// `*` is `.*`, `?` is `.`, `[!a-z]` is `[^a-z]`, and every other
    /// character stands for itself.
    pub fn regex(&self) -> String {
        let mut out = String::new();
        let mut chars = self.name().chars().peekable();
        let mut in_class = false;
        while let Some(c) = chars.next() {
            match c {
                '[' if !in_class => {
                    in_class = true;
                    out.push('[');
                    if chars.peek() == Some(&'!') {
                        chars.next();
                        out.push('^');
                    }
                }
                ']' if in_class => {
                    in_class = false;
                    out.push(']');
                }
                '\\' | '^' | '[' | ']' if in_class => {
                    out.push('\\');
                    out.push(c);
                }
                _ if in_class => out.push(c),
                '*' => out.push_str(".*"),
                '?' => out.push('.'),
                c if "\\.+()|{}^$[]".contains(c) => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
        out
    }

    pub fn matches(&self, kind: TargetKind, name: &str) -> bool {
        self.kind == kind && self.pattern.matches(name)
    }
}

/// Why a stranding is planned. Stored as its kind (`maintenance`,
/// `rollout`) and, for a window, its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plan {
    /// A maintenance window (its id) explains it.
    Maintenance(i64),
    /// The cluster's own rollout: a proxy that left by its own delete, or
    /// a proxy group's new generation.
    Rollout,
}

impl Plan {
    pub fn kind(self) -> &'static str {
        match self {
            Plan::Maintenance(_) => "maintenance",
            Plan::Rollout => "rollout",
        }
    }

    pub fn window(self) -> Option<i64> {
        match self {
            Plan::Maintenance(id) => Some(id),
            Plan::Rollout => None,
        }
    }

    /// From its stored columns; `None` for none, or for a kind this build
    /// does not know.
    pub fn from_stored(kind: Option<&str>, window: Option<i64>) -> Option<Plan> {
        match (kind?, window) {
            ("maintenance", Some(id)) => Some(Plan::Maintenance(id)),
            ("rollout", _) => Some(Plan::Rollout),
            _ => None,
        }
    }

    /// What Lifeline does about a stranding this plan explains (`None`:
    /// unplanned). The one rule: the outbox, Alertmanager and the
    /// automatic reconnects each ask it.
    ///
    /// - unplanned: told, reconnected, restarted;
    /// - an operator's window: none of them (they declared it; a manual
    ///   reconnect still goes);
    /// - a rollout: told (and says so), an agent that moves its own
    ///   tunnels is reconnected, but a sidecar does not restart Teleport's
    ///   agent for it (Teleport's agents find the new proxies themselves).
    pub fn handling(plan: Option<Plan>) -> Handling {
        match plan {
            None => Handling {
                told: true,
                reconnected: true,
                restarted: true,
            },
            Some(Plan::Maintenance(_)) => Handling {
                told: false,
                reconnected: false,
                restarted: false,
            },
            Some(Plan::Rollout) => Handling {
                told: true,
                reconnected: true,
                restarted: false,
            },
        }
    }

    /// In words, for titles: "planned: maintenance window 3".
    pub fn words(self) -> String {
        match self {
            Plan::Maintenance(id) => format!("planned: maintenance window {id}"),
            Plan::Rollout => "planned: rollout".to_string(),
        }
    }
}

/// Why an incident (or a stranding) is planned.
#[derive(Clone, Copy, Debug, serde::Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct Planned {
    /// `maintenance` (a window explains it) or `rollout` (the cluster's
    /// own: a proxy's departure, a group's new generation).
    pub kind: &'static str,
    /// The maintenance window, for `maintenance`.
    pub window: Option<i64>,
}

/// See [`Plan::handling`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handling {
    /// Notified: webhooks, Alertmanager.
    pub told: bool,
    /// Sent automatic reconnects.
    pub reconnected: bool,
    /// Restarted by its sidecar automatically.
    pub restarted: bool,
}

/// [`Planned`] as read back (a stored notice): its kind must be one this
/// build knows.
#[derive(serde::Deserialize)]
struct StoredPlanned {
    kind: String,
    window: Option<i64>,
}

impl<'de> serde::Deserialize<'de> for Planned {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Planned, D::Error> {
        let s = StoredPlanned::deserialize(d)?;
        Plan::from_stored(Some(&s.kind), s.window)
            .map(Planned::from)
            .ok_or_else(|| serde::de::Error::custom(format!("not a kind of plan: {:?}", s.kind)))
    }
}

impl Planned {
    /// The plan it shows (`None` for a kind this build does not know).
    pub fn plan(&self) -> Option<Plan> {
        Plan::from_stored(Some(self.kind), self.window)
    }
}

impl From<Plan> for Planned {
    fn from(p: Plan) -> Planned {
        Planned {
            kind: p.kind(),
            window: p.window(),
        }
    }
}

named_enum! {
    "snake_case";
    /// Where a window stands at a time.
    pub enum WindowStatus {
        Scheduled,
        Active,
        Over,
        Deleted,
    }
}

/// A window as the API, the audit and a notice show it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct WindowView {
    pub id: i64,
    /// `kind/name-or-glob`: `proxy/proxy-2`, `auth_server/auth-*`,
    /// `agent/node-1?`.
    pub targets: Vec<String>,
    pub from: Ts,
    pub until: Ts,
    pub reason: String,
    pub created_by: String,
    pub created_at: Ts,
    /// Ended early (or deleted): by whom and when (`null` otherwise).
    pub ended_by: Option<String>,
    pub ended_at: Option<Ts>,
    /// Deleted: when (`null` otherwise). A deleted window is kept, with
    /// its audit; it ended when it was deleted, by `ended_by`.
    pub deleted_at: Option<Ts>,
    /// Where it stood at the time it was read.
    pub status: WindowStatus,
}

impl WindowView {
    pub fn of(w: &Window, now: Ts) -> WindowView {
        WindowView {
            id: w.id,
            targets: w.targets.iter().map(|t| t.as_str().to_string()).collect(),
            from: w.from,
            until: w.until,
            reason: w.reason.clone(),
            created_by: w.created_by.clone(),
            created_at: w.created_at,
            ended_by: w.ended_by.clone(),
            ended_at: w.ended_at,
            deleted_at: w.deleted_at,
            status: w.status(now),
        }
    }
}

/// A maintenance window as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub id: i64,
    pub targets: Vec<Target>,
    pub from: Ts,
    pub until: Ts,
    pub reason: String,
    pub created_by: String,
    pub created_at: Ts,
    /// Ended early: by whom, when (a delete ends it too).
    pub ended_by: Option<String>,
    pub ended_at: Option<Ts>,
    /// Deleted, when: kept (with its audit), ended, shown as deleted.
    pub deleted_at: Option<Ts>,
}

impl Window {
    /// When it stops explaining strandings: `until`, or earlier when
    /// ended early.
    pub fn end(&self) -> Ts {
        self.ended_at.map_or(self.until, |e| e.min(self.until))
    }

    pub fn active(&self, now: Ts) -> bool {
        self.from <= now && now < self.end()
    }

    /// `scheduled`, `active`, `over` or `deleted` at `now`.
    pub fn status(&self, now: Ts) -> WindowStatus {
        if self.deleted_at.is_some() {
            WindowStatus::Deleted
        } else if self.active(now) {
            WindowStatus::Active
        } else if now < self.from {
            WindowStatus::Scheduled
        } else {
            WindowStatus::Over
        }
    }

    /// Whether it names `name` of `kind` among its targets.
    pub fn covers(&self, kind: TargetKind, name: &str) -> bool {
        self.targets.iter().any(|t| t.matches(kind, name))
    }

    /// The window as it holds in `cluster`: only its targets there, or
    /// `None` when it names nothing there.
    pub fn in_cluster(&self, cluster: &super::ClusterName) -> Option<Window> {
        let targets: Vec<Target> = self
            .targets
            .iter()
            .filter(|t| t.in_cluster(cluster))
            .cloned()
            .collect();
        (!targets.is_empty()).then(|| Window {
            targets,
            ..self.clone()
        })
    }
}

/// The kind of resource a cause names, when a window may name it.
fn resource_kind(cause: CauseKind) -> Option<TargetKind> {
    match cause {
        CauseKind::ProxyExpired | CauseKind::ProxyMissing | CauseKind::ProxyDeparted => {
            Some(TargetKind::Proxy)
        }
        CauseKind::AuthNotServing
        | CauseKind::AuthUnknown
        | CauseKind::AuthExpired
        | CauseKind::AgentExpired => Some(TargetKind::AuthServer),
        CauseKind::TunnelExpired | CauseKind::NoTunnels => None,
    }
}

/// The windows not yet over, as the fleet holds them: which one explains
/// a stranding now, and when that can next change.
#[derive(Clone, Debug, Default)]
pub struct Windows {
    /// By id: the oldest window that explains a stranding names it.
    list: Vec<Window>,
}

impl Windows {
    pub fn new(mut list: Vec<Window>) -> Windows {
        list.sort_by_key(|w| w.id);
        Windows { list }
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The window that explains `agent` being stranded for `cause` at
    /// `now`: one active now that names the agent, or the proxy or auth
    /// server behind its cause.
    pub fn explains(&self, agent: &str, cause: Option<&Cause>, now: Ts) -> Option<i64> {
        let behind = cause.and_then(|c| Some((resource_kind(c.kind)?, c.resource.as_str())));
        self.list
            .iter()
            .filter(|w| w.active(now))
            .find(|w| {
                w.covers(TargetKind::Agent, agent)
                    || behind.is_some_and(|(k, r)| !r.is_empty() && w.covers(k, r))
            })
            .map(|w| w.id)
    }

    /// The windows active at `now` that name proxy `name`.
    pub fn covers_proxy(&self, name: &str, now: Ts) -> bool {
        self.list
            .iter()
            .any(|w| w.active(now) && w.covers(TargetKind::Proxy, name))
    }

    /// The next moment after `now` a window starts or ends.
    pub fn next_change(&self, now: Ts) -> Option<Ts> {
        self.list
            .iter()
            .flat_map(|w| [w.from, w.end()])
            .filter(|t| *t > now)
            .min()
    }

    /// Active at `now`.
    pub fn active(&self, now: Ts) -> impl Iterator<Item = &Window> {
        self.list.iter().filter(move |w| w.active(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::domain::ClusterName;

    fn t(s: u64) -> Ts {
        Ts::ZERO.saturating_add(Duration::from_secs(s))
    }

    fn window(id: i64, targets: &[&str], from: u64, until: u64) -> Window {
        Window {
            id,
            targets: targets.iter().map(|s| Target::parse(s).unwrap()).collect(),
            from: t(from),
            until: t(until),
            reason: "patching".into(),
            created_by: "ops".into(),
            created_at: t(0),
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        }
    }

    fn cause(kind: CauseKind, r: &str) -> Cause {
        Cause {
            kind,
            resource: r.into(),
            planned: None,
        }
    }

    #[test]
    fn targets_parse_or_say_why_not() {
        let ok = Target::parse("proxy/proxy-*").unwrap();
        assert!(ok.matches(TargetKind::Proxy, "proxy-12"));
        assert!(!ok.matches(TargetKind::Agent, "proxy-12"));
        assert!(!ok.matches(TargetKind::Proxy, "edge-1"));
        assert_eq!(ok.as_str(), "proxy/proxy-*");
        let long = format!("agent/{}", "a".repeat(MAX_TARGET));
        let cases: [(&str, TargetError); 6] = [
            ("proxy-1", TargetError::NoKind),
            ("node/a", TargetError::Kind("node".into())),
            ("agent/", TargetError::Empty),
            (&long, TargetError::TooLong),
            (
                "agent/a\0b",
                TargetError::Unsafe("holds the control character U+0000 at byte 1".into()),
            ),
            (
                "agent/[a",
                TargetError::Glob("has a [ that is never closed".into()),
            ),
        ];
        for (s, want) in cases {
            assert_eq!(Target::parse(s).err(), Some(want), "{s:?}");
        }
        // Before its kind, a cluster's name or glob; none: every cluster.
        let (eu, us) = (ClusterName::new("prod-eu"), ClusterName::new("prod-us"));
        let one = Target::parse("prod-eu/proxy/proxy-*").unwrap();
        assert!(one.in_cluster(&eu) && !one.in_cluster(&us));
        assert!(one.matches(TargetKind::Proxy, "proxy-12"));
        assert_eq!(
            (one.name(), one.as_str()),
            ("proxy-*", "prod-eu/proxy/proxy-*")
        );
        let prods = Target::parse("prod-**/agent/*").unwrap();
        assert!(prods.in_cluster(&eu) && prods.in_cluster(&us));
        assert!(!prods.in_cluster(&ClusterName::new("staging")));
        assert!(prods.is_everything());
        let every = Target::parse("proxy/prod-eu/p1").unwrap();
        assert_eq!(
            (every.kind, every.name()),
            (TargetKind::Proxy, "prod-eu/p1")
        );
        assert!(every.in_cluster(&us));
        for (s, want) in [
            ("prod/node/a", TargetError::Kind("node".into())),
            ("pr[od]/agent/a", TargetError::Cluster),
            ("prod eu/agent/a", TargetError::Cluster),
        ] {
            assert_eq!(Target::parse(s).err(), Some(want), "{s:?}");
        }
        // Names hold no path: `**` is `*`, wherever it is.
        let stars = Target::parse("agent/node-**").unwrap();
        assert!(stars.matches(TargetKind::Agent, "node-1"));
        assert!(Target::parse("agent/*").unwrap().is_everything());
        assert!(Target::parse("proxy/***").unwrap().is_everything());
        assert!(!stars.is_everything());
    }

    /// Guards the contract: the schema's pattern and the parser accept
    /// exactly the same targets (so every schema-valid target is taken).
    #[test]
    fn the_schemas_pattern_is_what_the_parser_accepts() {
        let re = regex::Regex::new(TARGET_PATTERN).expect("the pattern compiles");
        let names = [
            "p",
            "proxy-*",
            "a?b",
            "[a-z]x",
            "[!0-9]",
            "[]",
            "[!]",
            "[",
            "]",
            "a]b",
            "[[a]",
            "[a[b]",
            "**",
            "a**b",
            "é*",
            "x\u{7f}",
            "x\u{85}",
            "x\u{2028}",
            "x\ty",
            "x/y",
            "[a-]",
            "[-a]",
            "[z-a]",
            "[!!]",
            "a b",
            "",
        ];
        for kind in ["proxy", "auth_server", "agent", "node"] {
            for name in names {
                let t = format!("{kind}/{name}");
                let schema = re.is_match(&t) && t.chars().count() <= MAX_TARGET;
                let parsed = Target::parse(&t);
                assert_eq!(
                    schema,
                    parsed.is_ok(),
                    "{t:?}: schema says {schema}, parser {parsed:?}"
                );
            }
        }
    }

    #[test]
    fn a_window_explains_strandings_behind_its_targets_while_active() {
        let w = Windows::new(vec![
            window(2, &["agent/node-*"], 10, 100),
            window(1, &["proxy/p1", "auth_server/auth-?"], 10, 100),
        ]);
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        let p2 = cause(CauseKind::ProxyExpired, "p2");
        let auth = cause(CauseKind::AgentExpired, "auth-1");
        let none = cause(CauseKind::NoTunnels, "");
        assert_eq!(w.explains("a", Some(&p1), t(9)), None, "not yet");
        assert_eq!(w.explains("a", Some(&p1), t(10)), Some(1));
        assert_eq!(w.explains("a", Some(&p2), t(50)), None);
        assert_eq!(w.explains("a", Some(&auth), t(50)), Some(1));
        assert_eq!(w.explains("node-3", Some(&p2), t(50)), Some(2));
        assert_eq!(
            w.explains("node-3", Some(&p1), t(50)),
            Some(1),
            "oldest first"
        );
        assert_eq!(w.explains("a", Some(&none), t(50)), None);
        assert_eq!(w.explains("a", Some(&p1), t(100)), None, "over");
        assert_eq!(w.next_change(t(0)), Some(t(10)));
        assert_eq!(w.next_change(t(10)), Some(t(100)));
        assert_eq!(w.next_change(t(100)), None);
    }

    #[test]
    fn a_window_ended_early_stops_then() {
        let mut w = window(1, &["proxy/p1"], 10, 100);
        w.ended_at = Some(t(40));
        assert_eq!(w.end(), t(40));
        let ws = Windows::new(vec![w]);
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        assert_eq!(ws.explains("a", Some(&p1), t(39)), Some(1));
        assert_eq!(ws.explains("a", Some(&p1), t(40)), None);
    }

    #[test]
    fn plans_round_trip_through_their_columns() {
        for p in [Plan::Maintenance(7), Plan::Rollout] {
            assert_eq!(Plan::from_stored(Some(p.kind()), p.window()), Some(p));
        }
        assert_eq!(Plan::from_stored(None, Some(3)), None);
        assert_eq!(Plan::from_stored(Some("later"), None), None);
    }

    #[test]
    fn one_rule_says_what_each_plan_lets_lifeline_do() {
        let h = |p| {
            let h = Plan::handling(p);
            (h.told, h.reconnected, h.restarted)
        };
        assert_eq!(h(None), (true, true, true), "unplanned: everything");
        assert_eq!(
            h(Some(Plan::Maintenance(3))),
            (false, false, false),
            "an operator's window: shown only"
        );
        assert_eq!(
            h(Some(Plan::Rollout)),
            (true, true, false),
            "a rollout: told and moved, never a sidecar restart"
        );
    }

    #[test]
    fn a_glob_target_is_the_same_names_as_a_regex() {
        let r = |t: &str| Target::parse(t).expect("target").regex();
        assert_eq!(r("proxy/edge-*"), "edge-.*");
        assert_eq!(r("proxy/db.[!x]?"), r"db\.[^x].");
        assert_eq!(r("agent/a+b(c)"), r"a\+b\(c\)");
        assert!(!Target::parse("proxy/p1").expect("target").is_glob());
        assert!(Target::parse("proxy/p[12]").expect("target").is_glob());
        assert_eq!(
            Target::parse("auth_server/auth-1").expect("target").name(),
            "auth-1"
        );
    }
}
