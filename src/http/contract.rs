//! What the API's operations share in their OpenAPI description: the
//! error responses and the schemas of parameters whose rules the types
//! alone do not say. A leaf: the handlers (`api`, `settings`, `signals`)
//! use it, and `openapi` assembles the document from them.

use super::error::ErrorBody;

/// A duration parameter's units and their lengths in seconds: `?since=`
/// takes any of them; `?step=` whole minutes, so not seconds.
pub const SINCE_UNITS: &[(char, u64)] = &[('s', 1), ('m', 60), ('h', 3600), ('d', 86_400)];
pub const STEP_UNITS: &[(char, u64)] = &[('m', 60), ('h', 3600), ('d', 86_400)];
/// Most digits of a written duration parameter.
pub const DURATION_DIGITS: usize = 9;

/// A duration parameter as written (`15m`): 1 to [`DURATION_DIGITS`]
/// digits without a leading zero, and one of `units`. The parsers and the
/// contract's patterns both come from here, so they take the same text.
pub fn written(v: &str, units: &[(char, u64)]) -> Option<std::time::Duration> {
    let unit = v.chars().last()?;
    let n = &v[..v.len() - unit.len_utf8()];
    let ok = (1..=DURATION_DIGITS).contains(&n.len())
        && !n.starts_with('0')
        && n.bytes().all(|b| b.is_ascii_digit());
    let len = units.iter().find(|(u, _)| *u == unit)?.1;
    let n: u64 = if ok { n.parse().ok()? } else { return None };
    Some(std::time::Duration::from_secs(n.checked_mul(len)?))
}

/// The pattern of [`written`] durations in `units`.
pub fn written_pattern(units: &[(char, u64)]) -> String {
    let units: String = units.iter().map(|(u, _)| *u).collect();
    format!("^[1-9][0-9]{{0,{}}}[{units}]$", DURATION_DIGITS - 1)
}

/// `?step=`: whole minutes, hours or days.
pub fn step() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(written_pattern(STEP_UNITS)))
        .description(Some(
            "One point per step: a whole number and one of m, h, d (at least 1m; default 1m).",
        ))
        .examples(["1m", "1h"])
        .build()
        .into()
}

/// A string that is one of `values`.
fn one_of(values: &[&'static str]) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// `?state=` of episodes: healthy periods are not episodes.
pub fn episode_state() -> utoipa::openapi::schema::Object {
    one_of(&["degraded", "stranded"])
}

/// `?kind=` of TTL windows: tunnels have no announce TTL.
pub fn ttl_kind() -> utoipa::openapi::schema::Object {
    one_of(&["proxy", "auth_server", "agent"])
}

/// `?since=`: an RFC 3339 time, or a duration back from now.
pub fn since() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(written_pattern(SINCE_UNITS))),
        )
        .description(Some(
            "An RFC 3339 time, or a duration back from now: a number and one of s, m, h, d.",
        ))
        .examples(["15m", "2026-11-24T07:00:00Z"])
        .build()
        .into()
}

/// What a read can answer besides its own 200.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum ReadErrors {
    /// A parameter is unknown, malformed or out of range (`bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// With `access.read_requires_token`: no token, or one that is not valid.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the `read` role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A list of one cluster's things, or every cluster's: as [`ReadErrors`],
/// and 404 `unknown_cluster` for a `cluster` no cluster is watched under.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum ListErrors {
    /// A parameter is unknown, malformed or out of range (`bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// With `access.read_requires_token`: no token, or one that is not valid.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the `read` role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// `cluster` names no cluster watched (`unknown_cluster`).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A read of one named thing: as [`ReadErrors`], and 404 `not_found`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum ReadOneErrors {
    /// A parameter is malformed (`bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// With `access.read_requires_token`: no token, or one that is not valid.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the `read` role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such thing (`not_found`, `unknown_setting`).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// What a mutation can answer besides its own success.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum WriteErrors {
    /// The body or a parameter is not valid (`bad_body`, `bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No token, or one that is not valid (`unauthenticated`,
    /// `invalid_token`, `bad_authorization`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the role the operation needs (`forbidden`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The agent, proxy, auth server or setting is unknown.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Valid, but not now (`not_connected`, `no_such_tunnel`,
    /// `no_destination`, `already_exists`, `already_over`, …: every code
    /// is in the error code table).
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body is larger than `server.max_body_bytes` (`body_too_large`).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// A manual reconnect of this agent too soon (`rate_limited`; see
    /// `Retry-After`).
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A regular expression (no anchors) for the decimal numbers from `lo` to
/// `hi`, written without leading zeros.
pub fn number_range(lo: u64, hi: u64) -> String {
    fn digits(n: u64) -> u32 {
        n.checked_ilog10().unwrap_or(0) + 1
    }
    fn class(a: u8, b: u8) -> String {
        if a == b {
            (a as char).to_string()
        } else {
            format!("[{}-{}]", a as char, b as char)
        }
    }
    fn any(k: usize) -> String {
        match k {
            0 => String::new(),
            1 => "[0-9]".into(),
            k => format!("[0-9]{{{k}}}"),
        }
    }
    /// Equal-length digit strings, leading zeros allowed.
    fn fixed(lo: &str, hi: &str) -> Vec<String> {
        let (Some(&a), Some(&b)) = (lo.as_bytes().first(), hi.as_bytes().first()) else {
            return vec![String::new()];
        };
        let (lr, hr) = (&lo[1..], &hi[1..]);
        let prefixed = |c: u8, v: Vec<String>| -> Vec<String> {
            v.into_iter().map(|p| format!("{}{p}", c as char)).collect()
        };
        if a == b {
            return prefixed(a, fixed(lr, hr));
        }
        let k = lr.len();
        let (zeros, nines) = ("0".repeat(k), "9".repeat(k));
        let mut out = Vec::new();
        let mut first = a;
        if lr != zeros {
            out.extend(prefixed(a, fixed(lr, &nines)));
            first = a + 1;
        }
        let last = if hr == nines { b } else { b - 1 };
        if first <= last {
            out.push(format!("{}{}", class(first, last), any(k)));
        }
        if hr != nines {
            out.extend(prefixed(b, fixed(&zeros, hr)));
        }
        out
    }
    if lo > hi {
        return "(?!)".into();
    }
    let mut parts = Vec::new();
    for len in digits(lo)..=digits(hi) {
        let floor = if len == 1 { 0 } else { 10u64.pow(len - 1) };
        let ceil = 10u64.checked_pow(len).map_or(u64::MAX, |p| p - 1);
        parts.extend(fixed(&lo.max(floor).to_string(), &hi.min(ceil).to_string()));
    }
    parts.join("|")
}

/// The written durations from `min` to `max` (whole seconds), each unit
/// with the numbers that keep it in range: exactly what the settings
/// room's `written_duration` takes within those bounds.
pub fn duration_pattern(min: std::time::Duration, max: std::time::Duration) -> String {
    let (min, max) = (min.as_secs(), max.as_secs());
    let units: Vec<String> = crate::settings::DURATION_UNITS
        .iter()
        .filter_map(|&(unit, len)| {
            let lo = min.div_ceil(len).max(1);
            let hi = max / len;
            (lo <= hi).then(|| format!("(?:{}){unit}", number_range(lo, hi)))
        })
        .collect();
    format!("^(?:{})$", units.join("|"))
}

/// The JSON Schema of `name`'s value, as the settings room takes it from
/// the API.
pub fn setting_value(name: crate::settings::Name) -> serde_json::Value {
    use crate::settings::Shape;
    use serde_json::json;
    let mode = json!({"enum": ["", "pick_first", "reconnect", null]});
    match name.shape() {
        Shape::Flag => json!({"type": "boolean"}),
        Shape::Share => json!({"type": "number", "exclusiveMinimum": 0, "maximum": 1}),
        Shape::Policy => json!({"anyOf": [
            {"type": "string", "const": "", "description": "The default: pick_first."},
            {
                "type": "object",
                "description": "RFD 0226's service config. Clients use the first entry; every entry must be teleport_pick_healthy.",
                "required": ["loadBalancingConfig"],
                "additionalProperties": false,
                "properties": {
                    "loadBalancingConfig": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["teleport_pick_healthy"],
                            "additionalProperties": false,
                            "properties": {"teleport_pick_healthy": {
                                "type": "object",
                                "additionalProperties": false,
                                "properties": {"mode": mode}
                            }}
                        }
                    },
                    "healthCheckConfig": {
                        "type": ["object", "null"],
                        "additionalProperties": false,
                        "properties": {"serviceName": {"type": "string"}}
                    }
                }
            }
        ]}),
        Shape::Duration { min, max, off } => {
            let written = json!({
                "type": "string",
                "pattern": duration_pattern(min, max),
                "description": "A whole number and one unit of s, m, h, d."
            });
            if off {
                json!({"anyOf": [written, {"const": "off"}, {"type": "null"}]})
            } else {
                written
            }
        }
    }
}

/// The body of `PUT /api/v1/settings/<name>`: `{"value": …}` of that
/// setting's schema.
pub fn setting_body(name: crate::settings::Name) -> serde_json::Value {
    use crate::settings::Shape;
    let example = match name.shape() {
        Shape::Policy => serde_json::json!({
            "loadBalancingConfig": [{"teleport_pick_healthy": {"mode": "reconnect"}}]
        }),
        _ => crate::settings::default_value(name),
    };
    serde_json::json!({
        "type": "object",
        "required": ["value"],
        "additionalProperties": false,
        "properties": {"value": {
            "description": name.describe(),
            "allOf": [setting_value(name)]
        }},
        "example": {"value": example}
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{written_duration, Name, Shape};
    use std::time::Duration;

    fn anchored(p: &str) -> regex::Regex {
        regex::Regex::new(&format!("^(?:{p})$")).expect("a valid expression")
    }

    #[test]
    fn number_ranges_match_exactly_their_numbers() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut cases = vec![
            (0, 9),
            (1, 1),
            (1, 10),
            (60, 31_536_000),
            (7, 7_000_000),
            (1, u64::MAX),
        ];
        for _ in 0..300 {
            let a = next() % 10u64.pow((next() % 10) as u32 + 1);
            let b = a + next() % 10u64.pow((next() % 10) as u32 + 1);
            cases.push((a, b));
        }
        for (lo, hi) in cases {
            let re = anchored(&number_range(lo, hi));
            let mut probes = vec![lo, hi, lo.saturating_sub(1), hi.saturating_add(1)];
            for _ in 0..40 {
                probes.push(next() % hi.saturating_add(2).max(1));
                probes.push(lo + next() % (hi - lo + 1).max(1));
            }
            for n in probes {
                assert_eq!(
                    re.is_match(&n.to_string()),
                    (lo..=hi).contains(&n),
                    "{n} in {lo}..={hi}: {re}"
                );
            }
            assert!(!re.is_match(&format!("0{lo}")), "no leading zero: {re}");
        }
    }

    /// `?since=` and `?step=` take exactly what their patterns state: the
    /// pattern and the parser agree on every unit, both ends of the digit
    /// count, leading zeros, signs, spaces, other units and other scripts.
    #[test]
    fn since_and_step_patterns_match_exactly_what_the_parsers_take() {
        for units in [SINCE_UNITS, STEP_UNITS] {
            let re = regex::Regex::new(&written_pattern(units)).expect("pattern");
            let mut cases: Vec<String> = [
                "",
                "m",
                "0m",
                "01m",
                "1",
                "15",
                "+5m",
                "-5m",
                " 5m",
                "5m ",
                "5 m",
                "1h30m",
                "1w",
                "5M",
                "５m",
                "545371s",
                "60s",
                "1m",
                "1d",
                "999999999d",
                "1000000000m",
                "123456789h",
                "0000000001h",
                "1.5h",
                "1e3s",
                "5ms",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let mut x: u64 = 0x2545_F491_4F6C_DD1D;
            let alphabet: Vec<char> = "0123456789smhdx ".chars().collect();
            for _ in 0..20_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let len = (x % 12) as usize;
                let s: String = (0..len)
                    .map(|i| alphabet[((x >> (i * 4)) % alphabet.len() as u64) as usize])
                    .collect();
                cases.push(s);
            }
            for c in cases {
                assert_eq!(
                    re.is_match(&c),
                    written(&c, units).is_some(),
                    "{c:?} against {re}"
                );
            }
        }
        assert_eq!(
            written("545371s", SINCE_UNITS).map(|d| d.as_secs()),
            Some(545_371)
        );
        assert_eq!(
            written("545371s", STEP_UNITS),
            None,
            "step is whole minutes"
        );
        assert_eq!(written("90m", STEP_UNITS).map(|d| d.as_secs()), Some(5400));
    }

    /// What the pattern documents is what the settings room takes: every
    /// unit, both ends, one past them, leading zeros, sizes that overflow.
    #[test]
    fn duration_patterns_match_exactly_the_durations_taken() {
        for name in Name::ALL {
            let Shape::Duration { min, max, .. } = name.shape() else {
                continue;
            };
            let re = regex::Regex::new(&duration_pattern(min, max)).expect("pattern");
            let mut written = vec![
                "".to_string(),
                "s".into(),
                "0s".into(),
                "01m".into(),
                "1h 30m".into(),
                "1w".into(),
                "18446744073709551615s".into(),
                "18446744073709552s".into(),
                "99999999999999999999d".into(),
                "+5m".into(),
                "５m".into(),
            ];
            for (unit, len) in crate::settings::DURATION_UNITS {
                for secs in [min.as_secs(), max.as_secs()] {
                    let n = secs / len;
                    for m in [
                        n.saturating_sub(1),
                        n,
                        n + 1,
                        n.saturating_mul(10),
                        1,
                        7,
                        59,
                        61,
                    ] {
                        written.push(format!("{m}{unit}"));
                    }
                }
            }
            for w in written {
                let taken = written_duration(&w).is_some_and(|d| d >= min && d <= max);
                assert_eq!(re.is_match(&w), taken, "{}: {w:?}", name.as_str());
            }
            assert!(max <= Duration::from_secs(u64::MAX / 2));
        }
    }
}
