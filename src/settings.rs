//! The settings room: Lifeline's dynamic settings, after RFD 0016.
//!
//! Owns: the list of settings, their defaults, parsing and validating a
//! value, the origin rules (`defaults`, `config-file`, `dynamic`) at start
//! and on every change, and the live handles the rest of Lifeline reads
//! ([`Live`] atomics, the load-balancing policy's `watch`). A change is
//! committed with its audit row (`store::settings`) before it takes effect
//! and before the caller hears of it.
//! Must not touch: HTTP (roles are checked by the caller, who says whether
//! the `create` verb is held), the fleet, the signals themselves.
//!
//! The rules, in RFD 0016's words and ours:
//! - at start, a setting the config file (or a `LIFELINE_*` variable)
//!   names is stored with origin `config-file`: the file wins;
//! - a setting the file does not name, whose stored origin is `config-file`
//!   or `defaults`, is reset to its default (origin `defaults`); a
//!   `dynamic` one is kept;
//! - `put` without `force` refuses to overwrite a non-default setting;
//!   with `force` it refuses a `config-file` one unless `confirm` is given
//!   too (and the caller holds `create`); a value set so lasts until the
//!   next start, when the file wins again;
//! - `reset` (rm) returns a setting to its default, refused for
//!   `config-file`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::store::Db;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::clock::{Clock, Ts};
use crate::config::Config;
use crate::domain::{LbPolicy, Origin, SettingAction};
use crate::store::settings::{self as rows, SettingChange, StoredSetting};

mod values;

pub use values::{default_value, written_duration, Shape, DURATION_UNITS};
use values::{duration_text, from_config, in_config, millis, parse, Form, Parsed};

/// A dynamic setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Name {
    GrpcClientLbPolicy,
    FullDiscovery,
    AutoReconnect,
    ReconnectInterval,
    GracefulTunnelClosing,
    StormShare,
    Retention,
    AuditRetention,
}

impl Name {
    pub const ALL: [Name; 8] = [
        Name::GrpcClientLbPolicy,
        Name::FullDiscovery,
        Name::AutoReconnect,
        Name::ReconnectInterval,
        Name::GracefulTunnelClosing,
        Name::StormShare,
        Name::Retention,
        Name::AuditRetention,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Name::GrpcClientLbPolicy => "grpc_client_lb_policy",
            Name::FullDiscovery => "full_discovery",
            Name::AutoReconnect => "auto_reconnect",
            Name::ReconnectInterval => "reconnect_interval",
            Name::GracefulTunnelClosing => "graceful_tunnel_closing",
            Name::StormShare => "storm_share",
            Name::Retention => "retention",
            Name::AuditRetention => "audit_retention",
        }
    }

    pub fn parse(s: &str) -> Option<Name> {
        Name::ALL.into_iter().find(|n| n.as_str() == s)
    }
}

/// On the wire (the API's path): one of the names.
impl utoipa::PartialSchema for Name {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(Name::ALL.iter().map(|n| n.as_str())))
            .into()
    }
}

impl utoipa::ToSchema for Name {
    fn name() -> std::borrow::Cow<'static, str> {
        "SettingName".into()
    }
}

impl Name {
    /// Where the config file sets it.
    pub fn config_key(self) -> &'static str {
        match self {
            Name::GrpcClientLbPolicy => "signals.grpc_client_lb_policy",
            Name::FullDiscovery => "signals.full_discovery",
            Name::AutoReconnect => "signals.auto_reconnect",
            Name::ReconnectInterval => "signals.reconnect_interval",
            Name::GracefulTunnelClosing => "signals.graceful_tunnel_closing",
            Name::StormShare => "signals.storm_share",
            Name::Retention => "storage.retention",
            Name::AuditRetention => "storage.audit_retention",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Name::GrpcClientLbPolicy => "client load-balancing policy served by GetServiceConfig, RFD 0226 JSON (\"\" = pick_first)",
            Name::FullDiscovery => "send every agent the full proxy list instead of deltas (true/false)",
            Name::AutoReconnect => "reconnect stranded agents automatically (true/false)",
            Name::ReconnectInterval => "reconnect every agent at this interval plus jitter (a duration from 1s to 30d, like 6h, or \"off\")",
            Name::GracefulTunnelClosing => "close tunnels beyond an agent's desired count once the topology is still (true/false)",
            Name::StormShare => "automatic reconnects pause when more than this share of agents strand at once (0 < x <= 1)",
            Name::Retention => "how long event history is kept (a duration from 1m to 365d)",
            Name::AuditRetention => "how long the signal audit and closed episodes are kept; pending signals and open episodes never go (a duration from 1h to 3650d)",
        }
    }

    fn list() -> String {
        Name::ALL.map(Name::as_str).join(", ")
    }
}

/// Why a change was refused. Messages follow RFD 0016's.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("unknown setting {0:?}; the settings are: {list}", list = Name::list())]
    Unknown(String),
    #[error("invalid value for {name}: {message}")]
    Invalid { name: &'static str, message: String },
    #[error("non-default setting {name} already exists (origin {origin}), use -f or --force flag (?force=true) to overwrite")]
    AlreadyExists {
        name: &'static str,
        origin: &'static str,
    },
    #[error("This setting ({name}) is managed by static configuration. We recommend removing it from the config file ({key}), restarting Lifeline and trying this command again.\n\nIf you would still like to proceed, re-run the command with both --force and --confirm flags (?force=true&confirm=true).")]
    ManagedByConfigFile {
        name: &'static str,
        key: &'static str,
    },
    #[error("This setting ({name}) is managed by static configuration. We recommend removing it from the config file ({key}) and restarting Lifeline in order to reset it to its default.")]
    RmManagedByConfigFile {
        name: &'static str,
        key: &'static str,
    },
    #[error("overwriting {name}, which the config file manages, needs the create role as well as update")]
    NeedsCreate { name: &'static str },
    /// Shortening a retention erases history at the next prune (the audit
    /// of the caller's own signals among it): more than `update` may do.
    #[error("shortening {name} from {from} to {to} erases what is kept; it needs the create role as well as update")]
    ShortenNeedsCreate {
        name: &'static str,
        from: String,
        to: String,
    },
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
}

/// The values the rest of Lifeline reads on every decision; a change is
/// seen at the next read (no restart). [`Settings::start`] applies every
/// setting before it returns, so nobody reads the zeroed start.
#[derive(Debug, Default)]
pub struct Live {
    full_discovery: AtomicBool,
    auto_reconnect: AtomicBool,
    graceful_tunnel_closing: AtomicBool,
    /// Parts per million.
    storm_share_ppm: AtomicU64,
    /// 0 = off.
    reconnect_interval_ms: AtomicU64,
    retention_ms: AtomicU64,
    audit_retention_ms: AtomicU64,
}

impl Live {
    pub fn full_discovery(&self) -> bool {
        self.full_discovery.load(Ordering::Relaxed)
    }
    pub fn auto_reconnect(&self) -> bool {
        self.auto_reconnect.load(Ordering::Relaxed)
    }
    pub fn graceful_tunnel_closing(&self) -> bool {
        self.graceful_tunnel_closing.load(Ordering::Relaxed)
    }
    pub fn storm_share(&self) -> f64 {
        self.storm_share_ppm.load(Ordering::Relaxed) as f64 / 1e6
    }
    pub fn reconnect_interval(&self) -> Option<Duration> {
        match self.reconnect_interval_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
    pub fn retention(&self) -> Duration {
        Duration::from_millis(self.retention_ms.load(Ordering::Relaxed))
    }
    pub fn audit_retention(&self) -> Duration {
        Duration::from_millis(self.audit_retention_ms.load(Ordering::Relaxed))
    }
    /// What the prune loop keeps, now.
    pub fn retention_policy(&self) -> crate::store::retention::Retention {
        crate::store::retention::Retention {
            history: self.retention(),
            audit: self.audit_retention(),
        }
    }
}

/// A setting as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SettingView {
    pub name: &'static str,
    pub value: Value,
    pub origin: Origin,
    pub default: Value,
    pub config_key: &'static str,
    pub description: &'static str,
    pub updated_at: Ts,
    pub updated_by: String,
}

/// How a `put` may overwrite (RFD 0016's `create` flags).
#[derive(Clone, Copy, Debug, Default)]
pub struct PutFlags {
    pub force: bool,
    pub confirm: bool,
    /// The caller holds the `create` role.
    pub may_create: bool,
}

/// The settings service: the only writer of settings.
pub struct Settings {
    db: Db,
    clock: Clock,
    live: Arc<Live>,
    lb: watch::Sender<LbPolicy>,
    /// One change at a time: read, check and write are one step, and a
    /// reload's read and apply are never in between.
    write: tokio::sync::Mutex<()>,
}

/// Who the start-up reconcile names in the audit.
const START: &str = "start";

impl Settings {
    /// Reconciles the stored settings with `cfg` (RFD 0016's start rules),
    /// commits them, and returns the service with live values applied.
    pub async fn start(db: Db, cfg: &Config, clock: Clock) -> Result<Settings, SettingsError> {
        let live = Arc::new(Live::default());
        let (lb, _) = watch::channel(LbPolicy::default());
        let s = Settings {
            db,
            clock,
            live,
            lb,
            write: tokio::sync::Mutex::new(()),
        };
        let now = clock.now();
        let mut tx = rows::begin_change(&s.db).await?;
        for name in Name::ALL {
            let old = tx.get(name.as_str()).await?;
            let (value, origin) = if in_config(cfg, name) {
                (from_config(cfg, name), Origin::ConfigFile)
            } else {
                match old.as_ref() {
                    Some(o) if o.origin == Origin::Dynamic => {
                        match serde_json::from_str::<Value>(&o.value)
                            .map_err(|e| e.to_string())
                            .and_then(|v| parse(name, &v, Form::Stored).map_err(|e| e.to_string()))
                        {
                            Ok((v, _)) => (v, Origin::Dynamic),
                            Err(e) => {
                                warn!(setting = name.as_str(), error = %e, "stored dynamic value is not valid; reset to the default");
                                (default_value(name), Origin::Defaults)
                            }
                        }
                    }
                    _ => (default_value(name), Origin::Defaults),
                }
            };
            // Values from the config were validated with it.
            let (canonical, parsed) = parse(name, &value, Form::Stored)?;
            s.apply(name, &parsed);
            let text = canonical.to_string();
            let same = old
                .as_ref()
                .is_some_and(|o| o.value == text && o.origin == origin);
            if !same {
                let new = StoredSetting {
                    name: name.as_str().into(),
                    value: text,
                    origin,
                    updated_us: now.as_micros(),
                    updated_by: START.into(),
                };
                tx.put(&new, old.as_ref(), SettingAction::Start).await?;
                if old.is_some() {
                    info!(setting = name.as_str(), value = %new.value, origin = origin.as_str(), "setting changed at start");
                }
            }
        }
        tx.commit().await?;
        Ok(s)
    }

    /// What the signals room reads.
    pub fn live(&self) -> Arc<Live> {
        self.live.clone()
    }

    /// Follows the load-balancing policy (`GetServiceConfig`).
    pub fn lb_policy(&self) -> watch::Receiver<LbPolicy> {
        self.lb.subscribe()
    }

    fn apply(&self, name: Name, p: &Parsed) {
        let l = &self.live;
        match p {
            Parsed::Lb(p) => {
                // Watchers (GetServiceConfig) wake only for a change.
                self.lb.send_if_modified(|cur| {
                    let changed = cur != p;
                    if changed {
                        *cur = p.clone();
                    }
                    changed
                });
            }
            Parsed::Flag(b) => {
                let flag = match name {
                    Name::FullDiscovery => &l.full_discovery,
                    Name::AutoReconnect => &l.auto_reconnect,
                    _ => &l.graceful_tunnel_closing,
                };
                flag.store(*b, Ordering::Relaxed);
            }
            Parsed::Interval(d) => l
                .reconnect_interval_ms
                .store(d.map_or(0, millis), Ordering::Relaxed),
            Parsed::Share(x) => l
                .storm_share_ppm
                .store((x * 1e6).round() as u64, Ordering::Relaxed),
            Parsed::Retention(d) => l.retention_ms.store(millis(*d), Ordering::Relaxed),
            Parsed::AuditRetention(d) => l.audit_retention_ms.store(millis(*d), Ordering::Relaxed),
        }
    }

    fn view(name: Name, row: Option<&StoredSetting>) -> SettingView {
        let default = default_value(name);
        let (value, origin, at, by) = match row {
            Some(r) => (
                serde_json::from_str(&r.value).unwrap_or_else(|_| default.clone()),
                r.origin,
                Ts(r.updated_us),
                r.updated_by.clone(),
            ),
            None => (default.clone(), Origin::Defaults, Ts(0), START.into()),
        };
        SettingView {
            name: name.as_str(),
            value,
            origin,
            default,
            config_key: name.config_key(),
            description: name.describe(),
            updated_at: at,
            updated_by: by,
        }
    }

    /// Applies the stored value of `name`: another replica changed it.
    pub async fn reload(&self, name: Name) -> Result<(), SettingsError> {
        // Not between this replica's own change's commit and its apply: a
        // value read before that commit would undo the change here.
        let _one = self.write.lock().await;
        let row = rows::get(&self.db, name.as_str()).await?;
        self.apply_stored(name, row.as_ref())
    }

    /// Applies `row` (the default when there is none or it is not JSON).
    /// The caller holds the write lock.
    fn apply_stored(&self, name: Name, row: Option<&StoredSetting>) -> Result<(), SettingsError> {
        let value = row
            .and_then(|r| serde_json::from_str::<Value>(&r.value).ok())
            .unwrap_or_else(|| default_value(name));
        let (_, parsed) = parse(name, &value, Form::Stored)?;
        self.apply(name, &parsed);
        Ok(())
    }

    /// Applies every stored value (a replica that may have missed
    /// changes): one read of all rows, under the write lock once. One that
    /// cannot be applied keeps its current value, is logged, and does not
    /// hold the others back; a value that did not change wakes nobody.
    pub async fn reload_all(&self) {
        let _one = self.write.lock().await;
        let stored = match rows::all(&self.db).await {
            Ok(stored) => stored,
            Err(e) => {
                warn!(error = %e, "cannot read the settings again; their current values stay");
                return;
            }
        };
        for name in Name::ALL {
            let row = stored.iter().find(|r| r.name == name.as_str());
            if let Err(e) = self.apply_stored(name, row) {
                warn!(setting = name.as_str(), error = %e, "cannot apply the stored setting; its current value stays");
            }
        }
    }

    pub fn name(s: &str) -> Result<Name, SettingsError> {
        Name::parse(s).ok_or_else(|| SettingsError::Unknown(s.to_string()))
    }

    pub async fn list(&self) -> Result<Vec<SettingView>, SettingsError> {
        let stored = rows::all(&self.db).await?;
        Ok(Name::ALL
            .into_iter()
            .map(|n| Self::view(n, stored.iter().find(|r| r.name == n.as_str())))
            .collect())
    }

    pub async fn get(&self, name: Name) -> Result<SettingView, SettingsError> {
        let row = rows::get(&self.db, name.as_str()).await?;
        Ok(Self::view(name, row.as_ref()))
    }

    pub async fn history(
        &self,
        name: Name,
        limit: u32,
    ) -> Result<Vec<SettingChange>, SettingsError> {
        Ok(rows::history(&self.db, name.as_str(), limit).await?)
    }

    /// `create` in RFD 0016's terms: sets `name` to `value` with origin
    /// `dynamic`, if the stored origin allows it under `flags`.
    pub async fn put(
        &self,
        name: Name,
        value: &Value,
        flags: PutFlags,
        actor: &str,
    ) -> Result<SettingView, SettingsError> {
        self.change(
            name,
            value,
            Origin::Dynamic,
            (actor, flags.may_create),
            |from| match (from, flags.force, flags.confirm) {
                (Origin::Defaults, ..) => Ok(SettingAction::Create),
                (o, false, _) => Err(SettingsError::AlreadyExists {
                    name: name.as_str(),
                    origin: o.as_str(),
                }),
                (Origin::Dynamic, true, _) => Ok(SettingAction::Force),
                (Origin::ConfigFile, true, false) => Err(SettingsError::ManagedByConfigFile {
                    name: name.as_str(),
                    key: name.config_key(),
                }),
                (Origin::ConfigFile, true, true) if !flags.may_create => {
                    Err(SettingsError::NeedsCreate {
                        name: name.as_str(),
                    })
                }
                (Origin::ConfigFile, true, true) => Ok(SettingAction::Confirm),
            },
        )
        .await
    }

    /// `rm` in RFD 0016's terms: back to the default, origin `defaults`.
    /// `may_create`: the caller holds the `create` role (a reset that
    /// shortens a retention needs it).
    pub async fn reset(
        &self,
        name: Name,
        actor: &str,
        may_create: bool,
    ) -> Result<SettingView, SettingsError> {
        self.change(
            name,
            &default_value(name),
            Origin::Defaults,
            (actor, may_create),
            |from| match from {
                Origin::ConfigFile => Err(SettingsError::RmManagedByConfigFile {
                    name: name.as_str(),
                    key: name.config_key(),
                }),
                _ => Ok(SettingAction::Rm),
            },
        )
        .await
    }

    /// One change: `decide` sees the stored origin and names the audit
    /// action or refuses; the row and its audit commit together, then the
    /// value applies. One change at a time.
    async fn change(
        &self,
        name: Name,
        value: &Value,
        origin: Origin,
        (actor, may_create): (&str, bool),
        decide: impl FnOnce(Origin) -> Result<SettingAction, SettingsError>,
    ) -> Result<SettingView, SettingsError> {
        let (canonical, parsed) = parse(name, value, Form::Api)?;
        let now = match parsed {
            Parsed::Retention(_) => Some(self.live.retention()),
            Parsed::AuditRetention(_) => Some(self.live.audit_retention()),
            _ => None,
        };
        if let (Some(from), Parsed::Retention(to) | Parsed::AuditRetention(to)) = (now, &parsed) {
            if *to < from && !may_create {
                return Err(SettingsError::ShortenNeedsCreate {
                    name: name.as_str(),
                    from: duration_text(from),
                    to: duration_text(*to),
                });
            }
        }
        let _one = self.write.lock().await;
        let mut tx = rows::begin_change(&self.db).await?;
        let old = tx.get(name.as_str()).await?;
        let from = old.as_ref().map_or(Origin::Defaults, |o| o.origin);
        let action = decide(from)?;
        let new = StoredSetting {
            name: name.as_str().into(),
            value: canonical.to_string(),
            origin,
            updated_us: self.clock.now().as_micros(),
            updated_by: actor.into(),
        };
        tx.put(&new, old.as_ref(), action).await?;
        tx.commit().await?;
        self.apply(name, &parsed);
        info!(setting = name.as_str(), value = %new.value, from = from.as_str(), to = origin.as_str(), %actor, action = action.as_str(), "setting changed");
        Ok(Self::view(name, Some(&new)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        MAX_AUDIT_RETENTION, MAX_RECONNECT_INTERVAL, MAX_RETENTION, MIN_AUDIT_RETENTION,
        MIN_RETENTION,
    };
    use serde_json::json;

    #[test]
    fn values_are_checked_and_made_canonical() {
        let ok = |n, v: Value| parse(n, &v, Form::Api).unwrap().0;
        let stored = |n, v: Value| parse(n, &v, Form::Stored).unwrap().0;
        assert_eq!(ok(Name::Retention, json!("90m")), json!("90m"));
        assert_eq!(ok(Name::Retention, json!("7200s")), json!("2h"));
        assert_eq!(ok(Name::AuditRetention, json!("90d")), json!("90d"));
        assert_eq!(ok(Name::ReconnectInterval, json!(null)), json!("off"));
        assert_eq!(ok(Name::ReconnectInterval, json!("off")), json!("off"));
        assert_eq!(ok(Name::ReconnectInterval, json!("6h")), json!("6h"));
        assert_eq!(ok(Name::AutoReconnect, json!(false)), json!(false));
        assert_eq!(ok(Name::GrpcClientLbPolicy, json!("")), json!(""));
        let obj = json!({"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":"reconnect"}}]});
        let policy = ok(Name::GrpcClientLbPolicy, obj.clone());
        assert_eq!(policy["loadBalancingConfig"], obj["loadBalancingConfig"]);
        // The file's and earlier versions' freer forms, stored canonical.
        assert_eq!(stored(Name::Retention, json!("1h 30m")), json!("90m"));
        assert_eq!(
            stored(Name::AuditRetention, json!("40days 3h")),
            json!("963h")
        );
        assert_eq!(
            stored(Name::ReconnectInterval, json!(" off ")),
            json!("off")
        );
        assert_eq!(
            stored(Name::GrpcClientLbPolicy, Value::String(obj.to_string())),
            policy
        );
        assert_eq!(stored(Name::GrpcClientLbPolicy, json!("  ")), json!(""));
        for (n, v, needle) in [
            (Name::Retention, json!("10s"), "at least 1m"),
            (Name::Retention, json!(5), "duration"),
            (Name::Retention, json!("1h 30m"), "one unit"),
            (Name::Retention, json!("090m"), "one unit"),
            (Name::Retention, json!(" 90m"), "one unit"),
            (Name::AuditRetention, json!("30m"), "at least 1h"),
            (Name::StormShare, json!(0), "(0, 1]"),
            (Name::StormShare, json!("half"), "number"),
            (Name::AutoReconnect, json!("yes"), "true or false"),
            (Name::ReconnectInterval, json!("100ms"), "one unit"),
            (Name::ReconnectInterval, json!(" off"), "one unit"),
            (Name::GrpcClientLbPolicy, json!("{nope"), "object"),
            (
                Name::GrpcClientLbPolicy,
                Value::String(obj.to_string()),
                "object",
            ),
            (Name::GrpcClientLbPolicy, json!(" "), "object"),
            (
                Name::GrpcClientLbPolicy,
                json!({"loadBalancingConfig":[
                    {"teleport_pick_healthy":{"mode":"reconnect"}},
                    {"teleport_pick_healthy":{"mode":"bogus"}}
                ]}),
                "bogus",
            ),
        ] {
            let e = parse(n, &v, Form::Api).unwrap_err().to_string();
            assert!(e.contains(n.as_str()) && e.contains(needle), "{v}: {e}");
        }
    }

    /// Every duration setting through 0, its minimum, its maximum, just
    /// past it and `u64::MAX` seconds: the ends are taken and kept exactly
    /// (in the live value too), everything outside is refused by name.
    #[test]
    fn duration_settings_take_their_range_and_refuse_the_rest() {
        let secs = |d: Duration| json!(format!("{}s", d.as_secs()));
        for (name, min, max) in [
            (
                Name::ReconnectInterval,
                Duration::from_secs(1),
                MAX_RECONNECT_INTERVAL,
            ),
            (Name::Retention, MIN_RETENTION, MAX_RETENTION),
            (
                Name::AuditRetention,
                MIN_AUDIT_RETENTION,
                MAX_AUDIT_RETENTION,
            ),
        ] {
            assert!(
                name.describe().contains(&duration_text(max)),
                "{} documents its maximum: {}",
                name.as_str(),
                name.describe()
            );
            for d in [min, max] {
                let (shown, parsed) = parse(name, &secs(d), Form::Api).unwrap();
                let back = match parsed {
                    Parsed::Interval(Some(x))
                    | Parsed::Retention(x)
                    | Parsed::AuditRetention(x) => x,
                    other => panic!("{other:?}"),
                };
                assert_eq!(back, d);
                assert_eq!(Duration::from_millis(millis(back)), d, "the live value");
                // What is shown parses back to the same value.
                assert_eq!(
                    parse(name, &shown, Form::Api).unwrap().1,
                    parse(name, &secs(d), Form::Api).unwrap().1
                );
            }
            for (v, needle) in [
                (json!("0s"), "at least"),
                (secs(max + Duration::from_secs(1)), "at most"),
                (json!("18446744073709552s"), "at most"),
                (json!(format!("{}s", u64::MAX)), name.as_str()),
            ] {
                let e = parse(name, &v, Form::Api).unwrap_err().to_string();
                assert!(e.contains(name.as_str()) && e.contains(needle), "{v}: {e}");
            }
        }
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn defaults_parse_and_every_name_round_trips() {
        for n in Name::ALL {
            let (canonical, _) = parse(n, &default_value(n), Form::Api).unwrap();
            assert_eq!(canonical, default_value(n), "defaults are canonical");
            assert_eq!(Name::parse(n.as_str()), Some(n));
        }
        let e = Settings::name("nope").unwrap_err().to_string();
        assert!(e.contains("auto_reconnect"), "{e}");
    }

    #[test]
    fn explicit_keys_and_changed_values_count_as_in_the_file() {
        let c = Config::from_toml("[signals]\nauto_reconnect = true\n").unwrap();
        assert!(
            in_config(&c, Name::AutoReconnect),
            "named with its default value"
        );
        assert!(!in_config(&c, Name::FullDiscovery));
        let mut c = Config::default();
        c.storage.retention = Duration::from_secs(7200);
        assert!(in_config(&c, Name::Retention), "set in code");
    }
}
