//! A setting's value: its shape, how it is written (`30s`, `5m`), parsed
//! and checked against its bounds, and where its default and the config
//! file's value come from.
//!
//! Owns: values. Must not touch: the origin rules or the store
//! (`settings.rs`).

use std::time::Duration;

use serde_json::Value;

use super::{Name, SettingsError};
use crate::config::{
    Config, MAX_AUDIT_RETENTION, MAX_RECONNECT_INTERVAL, MAX_RETENTION, MIN_AUDIT_RETENTION,
    MIN_RETENTION,
};
use crate::domain::LbPolicy;

/// A parsed value, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Parsed {
    Lb(LbPolicy),
    Flag(bool),
    Interval(Option<Duration>),
    Share(f64),
    Retention(Duration),
    AuditRetention(Duration),
}

/// Milliseconds for a live atomic: checked, never wrapped (parsing bounds
/// every duration far below `u64::MAX` ms; this is the belt to that).
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The units a written duration may take, with their length in seconds.
pub const DURATION_UNITS: [(char, u64); 4] = [('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];

/// A duration as the API and the CLI write it: a whole number without a
/// leading zero (0 itself is one) and one unit of s, m, h, d ("90m", "30d"). `None` for any
/// other form; a number too large for any duration is `Duration::MAX`, so
/// it is refused as out of range, never wrapped.
pub fn written_duration(s: &str) -> Option<Duration> {
    let unit = s.chars().last()?;
    let secs = DURATION_UNITS.iter().find(|(u, _)| *u == unit)?.1;
    let n = &s[..s.len() - unit.len_utf8()];
    let leading_zero = n.len() > 1 && n.starts_with('0');
    if n.is_empty() || leading_zero || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        n.parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(secs))
            .map_or(Duration::MAX, Duration::from_secs),
    )
}

/// A duration as settings show it: the written form in the largest unit
/// that holds it whole ("90m", "30d"), so what is shown can be written
/// back. Only a config-file value below whole seconds (written in the
/// file's freer form) is shown in humantime's text.
pub(super) fn duration_text(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 {
        return humantime::format_duration(d).to_string();
    }
    let (unit, len) = DURATION_UNITS
        .iter()
        .rev()
        .find(|(_, len)| secs % len == 0)
        .copied()
        .unwrap_or(('s', 1));
    format!("{}{unit}", secs / len)
}

/// What kind of value a setting holds, with its bounds: the one statement
/// both [`parse`] and the API's contract follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// `true` or `false`.
    Flag,
    /// A number in (0, 1].
    Share,
    /// RFD 0226's service config as a JSON object, or `""` for the default.
    Policy,
    /// A written duration ([`written_duration`]) from `min` to `max`; with
    /// `off`, also `"off"` or `null`.
    Duration {
        min: Duration,
        max: Duration,
        off: bool,
    },
}

impl Name {
    pub fn shape(self) -> Shape {
        match self {
            Name::GrpcClientLbPolicy => Shape::Policy,
            Name::FullDiscovery | Name::AutoReconnect | Name::GracefulTunnelClosing => Shape::Flag,
            Name::StormShare => Shape::Share,
            Name::ReconnectInterval => Shape::Duration {
                min: Duration::from_secs(1),
                max: MAX_RECONNECT_INTERVAL,
                off: true,
            },
            Name::Retention => Shape::Duration {
                min: MIN_RETENTION,
                max: MAX_RETENTION,
                off: false,
            },
            Name::AuditRetention => Shape::Duration {
                min: MIN_AUDIT_RETENTION,
                max: MAX_AUDIT_RETENTION,
                off: false,
            },
        }
    }
}

/// Where a value comes from, which decides how freely it may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The API (and the CLI through it): exactly [`Shape`], as the
    /// contract documents it.
    Api,
    /// The config file or a stored row: also humantime's durations ("1h
    /// 30m", "2days") and the policy as JSON text, as the file writes it
    /// and as earlier versions stored it.
    Stored,
}

/// Checks `v` for `name`; returns the canonical JSON to store and the
/// parsed value.
pub(super) fn parse(name: Name, v: &Value, form: Form) -> Result<(Value, Parsed), SettingsError> {
    let bad = |message: String| SettingsError::Invalid {
        name: name.as_str(),
        message,
    };
    let duration = |v: &Value| -> Result<Duration, SettingsError> {
        let s = v
            .as_str()
            .ok_or_else(|| bad(format!("expected a duration like \"90m\", got {v}")))?;
        match form {
            Form::Api => written_duration(s).ok_or_else(|| {
                bad(format!(
                    "{s:?} is not a duration: write a whole number and one unit of s, m, h, d, like \"90m\""
                ))
            }),
            Form::Stored => humantime::parse_duration(s.trim())
                .map_err(|e| bad(format!("{s:?} is not a duration like \"90m\": {e}"))),
        }
    };
    let within = |d: Duration, min: Duration, max: Duration, or: &str| {
        if d < min {
            return Err(bad(format!("must be at least {}{or}", duration_text(min))));
        }
        if d > max {
            return Err(bad(format!("must be at most {}{or}", duration_text(max))));
        }
        Ok(d)
    };
    match (name.shape(), name) {
        (Shape::Policy, _) => {
            let text = match (v, form) {
                (Value::String(s), Form::Api) if s.is_empty() => String::new(),
                (Value::String(s), Form::Stored) => s.clone(),
                (Value::Object(_), _) => v.to_string(),
                (other, Form::Api) => {
                    return Err(bad(format!(
                        "expected RFD 0226 service config JSON as an object, or \"\" for the default, got {other}"
                    )))
                }
                (other, Form::Stored) => {
                    return Err(bad(format!(
                        "expected RFD 0226 service config JSON (a string or an object), got {other}"
                    )))
                }
            };
            let p = LbPolicy::parse(&text).map_err(|e| bad(e.to_string()))?;
            let canonical = if text.trim().is_empty() {
                Value::String(String::new())
            } else {
                serde_json::from_str(&p.to_json()).unwrap_or(Value::String(text))
            };
            Ok((canonical, Parsed::Lb(p)))
        }
        (Shape::Flag, _) => match v {
            Value::Bool(b) => Ok((Value::Bool(*b), Parsed::Flag(*b))),
            other => Err(bad(format!("expected true or false, got {other}"))),
        },
        (Shape::Share, _) => {
            let x = v
                .as_f64()
                .ok_or_else(|| bad(format!("expected a number in (0, 1], got {v}")))?;
            if !(x > 0.0 && x <= 1.0) {
                return Err(bad(format!("must be in (0, 1], got {x}")));
            }
            Ok((v.clone(), Parsed::Share(x)))
        }
        (Shape::Duration { min, max, off }, name) => {
            let is_off = match (v, form) {
                (Value::Null, _) => true,
                (Value::String(s), Form::Api) => s == "off",
                (Value::String(s), Form::Stored) => s.trim() == "off",
                _ => false,
            };
            if off && is_off {
                return Ok((Value::String("off".into()), Parsed::Interval(None)));
            }
            let or = if off { " (or \"off\")" } else { "" };
            let d = within(duration(v)?, min, max, or)?;
            let parsed = match name {
                Name::ReconnectInterval => Parsed::Interval(Some(d)),
                Name::Retention => Parsed::Retention(d),
                _ => Parsed::AuditRetention(d),
            };
            Ok((Value::String(duration_text(d)), parsed))
        }
    }
}

/// The value `cfg` gives `name`, as stored JSON.
pub(super) fn from_config(cfg: &Config, name: Name) -> Value {
    let s = &cfg.signals;
    match name {
        Name::GrpcClientLbPolicy => Value::String(s.grpc_client_lb_policy.clone()),
        Name::FullDiscovery => Value::Bool(s.full_discovery),
        Name::AutoReconnect => Value::Bool(s.auto_reconnect),
        Name::ReconnectInterval => Value::String(
            s.reconnect_interval
                .map_or_else(|| "off".to_string(), duration_text),
        ),
        Name::GracefulTunnelClosing => Value::Bool(s.graceful_tunnel_closing),
        Name::StormShare => serde_json::json!(s.storm_share),
        Name::Retention => Value::String(duration_text(cfg.storage.retention)),
        Name::AuditRetention => Value::String(duration_text(cfg.storage.audit_retention)),
    }
}

/// The built-in default of `name`.
pub fn default_value(name: Name) -> Value {
    from_config(&Config::default(), name)
}

/// True when the config names `name`: set in the file or a variable, or
/// (for configs built in code: the demo, tests) set to something other
/// than the default.
pub(super) fn in_config(cfg: &Config, name: Name) -> bool {
    cfg.is_explicit(name.config_key()) || from_config(cfg, name) != default_value(name)
}
