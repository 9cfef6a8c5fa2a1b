//! Turns wire messages into validated domain values. Anything that comes from
//! the network is checked here, once; a bad input becomes a `Rejection` with a
//! stable code (counted per code) and a message, never a panic.

use std::time::Duration;

use crate::clock::{dur_micros, Ts};
use crate::domain::{text, Change, Kind, RejectCode, Rejection, Server, Tunnel, MAX_NAME_LEN};
use crate::proto::timestamp;
use crate::proto::v1 as pb;

/// Bounds that validation enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub default_ttl: Duration,
    pub max_expired_age: Duration,
    pub max_ttl: Duration,
}

/// A rejection, its name cut to a readable length.
pub fn reject(code: RejectCode, kind: &str, name: &str, message: impl Into<String>) -> Rejection {
    // Shown in logs, the API and the dashboard: never raw.
    let mut name = text::clean_owned(name.to_string());
    if name.len() > 80 {
        let mut cut = 80;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
        name.push('…');
    }
    Rejection {
        code,
        kind: text::bounded(kind, 80),
        name,
        message: text::clean_owned(message.into()),
    }
}

/// A resource name: not blank, at most `MAX_NAME_LEN` bytes, no control
/// characters (a NUL among them).
pub fn check_name(kind: &str, name: &str, field: &str) -> Result<(), Rejection> {
    if name.trim().is_empty() {
        return Err(reject(
            RejectCode::EmptyName,
            kind,
            name,
            format!("{field} is empty"),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(reject(
            RejectCode::NameTooLong,
            kind,
            name,
            format!("{field} is {} bytes; at most {MAX_NAME_LEN}", name.len()),
        ));
    }
    if let Some(problem) = text::name_problem(name) {
        return Err(reject(
            RejectCode::ControlCharacter,
            kind,
            &text::clean(name),
            format!("{field} {problem}"),
        ));
    }
    Ok(())
}

fn check_expires(
    kind: &str,
    name: &str,
    expires: Option<&prost_types::Timestamp>,
    now: Ts,
    limits: &Limits,
) -> Result<Option<Ts>, Rejection> {
    let Some(raw) = expires else { return Ok(None) };
    let t = timestamp(raw).ok_or_else(|| {
        reject(
            RejectCode::BadTimestamp,
            kind,
            name,
            format!(
                "expires {}s/{}ns is not a valid timestamp",
                raw.seconds, raw.nanos
            ),
        )
    })?;
    if t < now.saturating_sub(limits.max_expired_age) {
        return Err(reject(
            RejectCode::ExpiredTooLongAgo,
            kind,
            name,
            format!(
                "expires {t} is more than {} in the past",
                humantime::format_duration(limits.max_expired_age)
            ),
        ));
    }
    if t > now.saturating_add(limits.max_ttl) {
        return Err(reject(
            RejectCode::ExpiresTooFar,
            kind,
            name,
            format!(
                "expires {t} is more than {} ahead",
                humantime::format_duration(limits.max_ttl)
            ),
        ));
    }
    Ok(Some(t))
}

/// A heartbeat's expiry: present, and within the bounds.
pub fn heartbeat_expires(
    kind: &str,
    name: &str,
    expires: Option<&prost_types::Timestamp>,
    now: Ts,
    limits: &Limits,
) -> Result<Ts, Rejection> {
    check_expires(kind, name, expires, now, limits)?.ok_or_else(|| {
        reject(
            RejectCode::MissingExpires,
            kind,
            name,
            "a heartbeating server needs expires",
        )
    })
}

/// Validates a `Server`. `now` is Lifeline's clock.
pub fn server(p: pb::Server, now: Ts, limits: &Limits) -> Result<Server, Rejection> {
    let kind: Kind = match p.kind.parse() {
        Ok(k) if Kind::is_server(k) => k,
        _ => {
            return Err(reject(
                RejectCode::UnknownKind,
                &p.kind,
                &p.name,
                format!(
                    "unknown server kind {:?} (expected proxy, auth_server or agent)",
                    p.kind
                ),
            ))
        }
    };
    let k = kind.as_str();
    check_name(k, &p.name, "name")?;
    let ttl = match &p.ttl {
        None => limits.default_ttl,
        Some(d) => {
            if d.seconds < 0 || d.nanos < 0 || (d.seconds == 0 && d.nanos == 0) {
                return Err(reject(
                    RejectCode::BadTtl,
                    k,
                    &p.name,
                    format!("ttl {}s/{}ns must be positive", d.seconds, d.nanos),
                ));
            }
            let ttl = Duration::new(d.seconds as u64, d.nanos.clamp(0, 999_999_999) as u32);
            if ttl > limits.max_ttl {
                return Err(reject(
                    RejectCode::BadTtl,
                    k,
                    &p.name,
                    format!(
                        "ttl {} exceeds the maximum {}",
                        humantime::format_duration(ttl),
                        humantime::format_duration(limits.max_ttl)
                    ),
                ));
            }
            ttl
        }
    };
    let expires = heartbeat_expires(k, &p.name, p.expires.as_ref(), now, limits)?;
    if kind == Kind::Agent && !p.auth_server.is_empty() {
        check_name(k, &p.auth_server, "auth_server")?;
    }
    debug_assert!(dur_micros(ttl) > 0);
    // Free text is kept, with control characters replaced.
    Ok(Server {
        kind,
        name: p.name,
        addr: text::clean_owned(p.addr),
        version: text::clean_owned(p.version),
        group_id: text::clean_owned(p.group_id),
        group_generation: p.group_generation,
        expires,
        ttl,
        labels: p
            .labels
            .into_iter()
            .map(|(k, v)| (text::clean_owned(k), text::clean_owned(v)))
            .collect(),
        auth_server: p.auth_server,
    })
}

/// Validates a `TunnelConnection`.
pub fn tunnel(p: pb::TunnelConnection, now: Ts, limits: &Limits) -> Result<Tunnel, Rejection> {
    let k = Kind::TunnelConnection.as_str();
    check_name(k, &p.name, "name")?;
    if p.agent.is_empty() || p.proxy.is_empty() {
        return Err(reject(
            RejectCode::MissingField,
            k,
            &p.name,
            "a tunnel needs both agent and proxy",
        ));
    }
    check_name(k, &p.agent, "agent")?;
    check_name(k, &p.proxy, "proxy")?;
    let expires = check_expires(k, &p.name, p.expires.as_ref(), now, limits)?;
    let last_heartbeat = match &p.last_heartbeat {
        None => None,
        Some(raw) => Some(timestamp(raw).ok_or_else(|| {
            reject(
                RejectCode::BadTimestamp,
                k,
                &p.name,
                "last_heartbeat is not a valid timestamp",
            )
        })?),
    };
    Ok(Tunnel {
        name: p.name,
        agent: p.agent,
        proxy: p.proxy,
        last_heartbeat,
        expires,
    })
}

/// Validates a non-INIT event.
pub fn event(ev: pb::Event, now: Ts, limits: &Limits) -> Result<Change, Rejection> {
    use pb::event::Resource;
    let ty = pb::EventType::try_from(ev.r#type).ok();
    match (ty, ev.resource) {
        (_, None) => Err(reject(
            RejectCode::EmptyEvent,
            "",
            "",
            "event carries no resource",
        )),
        (Some(pb::EventType::Put), Some(Resource::Server(s))) => {
            server(s, now, limits).map(Change::PutServer)
        }
        (Some(pb::EventType::Put), Some(Resource::Tunnel(t))) => {
            tunnel(t, now, limits).map(Change::PutTunnel)
        }
        (Some(pb::EventType::Delete), Some(Resource::Server(s))) => {
            let kind = match s.kind.parse::<Kind>() {
                Ok(k) if k.is_server() => k,
                _ => {
                    return Err(reject(
                        RejectCode::UnknownKind,
                        &s.kind,
                        &s.name,
                        format!("unknown server kind {:?}", s.kind),
                    ))
                }
            };
            check_name(kind.as_str(), &s.name, "name")?;
            Ok(Change::DeleteServer(kind, s.name))
        }
        (Some(pb::EventType::Delete), Some(Resource::Tunnel(t))) => {
            check_name(Kind::TunnelConnection.as_str(), &t.name, "name")?;
            Ok(Change::DeleteTunnel(t.name))
        }
        (_, Some(Resource::Status(_))) => Err(reject(
            RejectCode::BadEventType,
            "",
            "",
            "WatchStatus outside the INIT event",
        )),
        (ty, Some(_)) => Err(reject(
            RejectCode::BadEventType,
            "",
            "",
            format!("unexpected event type {:?} ({})", ty, ev.r#type),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{to_duration, to_timestamp};

    const NOW: Ts = Ts(1_700_000_000_000_000);

    fn limits() -> Limits {
        Limits {
            default_ttl: Duration::from_secs(600),
            max_expired_age: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(7 * 86400),
        }
    }

    fn proxy(name: &str) -> pb::Server {
        pb::Server {
            kind: "proxy".into(),
            name: name.into(),
            expires: Some(to_timestamp(NOW.saturating_add(Duration::from_secs(60)))),
            ttl: Some(to_duration(Duration::from_secs(60))),
            ..Default::default()
        }
    }

    fn code(r: Result<Server, Rejection>) -> RejectCode {
        r.unwrap_err().code
    }

    #[test]
    fn good_proxy_is_accepted() {
        let s = server(proxy("p1"), NOW, &limits()).unwrap();
        assert_eq!(s.kind, Kind::Proxy);
        assert_eq!(s.ttl, Duration::from_secs(60));
        assert_eq!(s.last_heartbeat(), NOW);
    }

    #[test]
    fn missing_ttl_takes_the_default() {
        let mut p = proxy("p1");
        p.ttl = None;
        assert_eq!(
            server(p, NOW, &limits()).unwrap().ttl,
            Duration::from_secs(600)
        );
    }

    #[test]
    fn bad_servers_are_rejected_with_codes() {
        let l = limits();
        let mut p = proxy("p1");
        p.kind = "node".into();
        assert_eq!(code(server(p, NOW, &l)), RejectCode::UnknownKind);

        assert_eq!(code(server(proxy(""), NOW, &l)), RejectCode::EmptyName);
        assert_eq!(
            code(server(proxy(&"x".repeat(300)), NOW, &l)),
            RejectCode::NameTooLong
        );

        for (s, n) in [(0, 0), (-5, 0), (0, -1)] {
            let mut p = proxy("p1");
            p.ttl = Some(prost_types::Duration {
                seconds: s,
                nanos: n,
            });
            assert_eq!(code(server(p, NOW, &l)), RejectCode::BadTtl, "{s}/{n}");
        }

        let mut p = proxy("p1");
        p.expires = None;
        assert_eq!(code(server(p, NOW, &l)), RejectCode::MissingExpires);

        let mut p = proxy("p1");
        p.expires = Some(to_timestamp(NOW.saturating_sub(Duration::from_secs(7200))));
        assert_eq!(code(server(p, NOW, &l)), RejectCode::ExpiredTooLongAgo);

        let mut p = proxy("p1");
        p.expires = Some(prost_types::Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        });
        assert_eq!(code(server(p, NOW, &l)), RejectCode::BadTimestamp);

        let mut p = proxy("p1");
        p.expires = Some(prost_types::Timestamp {
            seconds: 1,
            nanos: -4,
        });
        assert_eq!(code(server(p, NOW, &l)), RejectCode::BadTimestamp);
    }

    /// Names holding a control character are refused (and the rejection
    /// shows them cleaned); free text is kept with those replaced.
    #[test]
    fn control_characters_refuse_names_and_are_replaced_in_free_text() {
        let l = limits();
        for bad in ["p\0", "p\n1", "\u{1b}[2Jp", "p\u{7f}"] {
            let r = server(proxy(bad), NOW, &l).unwrap_err();
            assert_eq!(r.code, RejectCode::ControlCharacter, "{bad:?}");
            assert!(!r.name.chars().any(text::is_unsafe), "{r:?}");
            assert!(r.message.contains("U+00"), "{r:?}");
        }
        let mut a = proxy("a1");
        a.kind = "agent".into();
        a.auth_server = "auth\0".into();
        assert_eq!(code(server(a, NOW, &l)), RejectCode::ControlCharacter);
        let t = pb::TunnelConnection {
            name: "t1".into(),
            agent: "a\u{0}1".into(),
            proxy: "p1".into(),
            ..Default::default()
        };
        assert_eq!(
            tunnel(t, NOW, &l).unwrap_err().code,
            RejectCode::ControlCharacter
        );

        let mut p = proxy("p1");
        p.version = "17.0\0-rc".into();
        p.addr = "10.0.0.1:3080\r\n".into();
        p.group_id = "g\u{1b}".into();
        p.labels.insert("env\0".into(), "prod\0uction".into());
        let s = server(p, NOW, &l).unwrap();
        assert_eq!(s.version, "17.0\u{FFFD}-rc");
        assert_eq!(s.addr, "10.0.0.1:3080\u{FFFD}\u{FFFD}");
        assert_eq!(s.group_id, "g\u{FFFD}");
        assert_eq!(&s.labels["env\u{FFFD}"], "prod\u{FFFD}uction");
    }

    /// Every expiry from the whole `i64` range of seconds is accepted or
    /// refused with a code: never a panic, never a time past year 9999.
    #[test]
    fn expiries_over_the_whole_range_are_refused_or_in_range() {
        let l = limits();
        let mut secs = vec![
            i64::MIN,
            -1,
            0,
            253_402_300_799,
            253_402_300_800,
            300_000_000_000,
            i64::MAX,
        ];
        let mut x: u64 = 7;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            secs.push(x as i64);
        }
        for s in secs {
            let mut p = proxy("p1");
            p.expires = Some(prost_types::Timestamp {
                seconds: s,
                nanos: 0,
            });
            match server(p, NOW, &l) {
                Ok(v) => assert!(v.expires.in_range()),
                Err(r) => {
                    assert!(!r.to_string().is_empty());
                }
            }
            // A far future passes validation's range check only to be
            // refused as too far ahead, its message formatted.
            let mut far = limits();
            far.max_ttl = Duration::MAX;
            let mut p = proxy("p1");
            p.expires = Some(prost_types::Timestamp {
                seconds: s,
                nanos: 0,
            });
            if let Ok(v) = server(p, NOW, &far) {
                assert!(v.expires.in_range(), "{s}");
            }
        }
        let mut p = proxy("p1");
        p.expires = Some(prost_types::Timestamp {
            seconds: 300_000_000_000,
            nanos: 0,
        });
        assert_eq!(code(server(p, NOW, &l)), RejectCode::BadTimestamp);
    }

    #[test]
    fn recently_expired_is_accepted() {
        let mut p = proxy("p1");
        p.expires = Some(to_timestamp(NOW.saturating_sub(Duration::from_secs(5))));
        assert!(server(p, NOW, &limits()).is_ok());
    }

    #[test]
    fn tunnels_need_agent_and_proxy() {
        let t = pb::TunnelConnection {
            name: "t1".into(),
            agent: "a1".into(),
            proxy: String::new(),
            ..Default::default()
        };
        assert_eq!(
            tunnel(t, NOW, &limits()).unwrap_err().code,
            RejectCode::MissingField
        );
    }

    #[test]
    fn events_without_resource_or_type_are_rejected() {
        let ev = pb::Event {
            r#type: pb::EventType::Put as i32,
            resource: None,
        };
        assert_eq!(
            event(ev, NOW, &limits()).unwrap_err().code,
            RejectCode::EmptyEvent
        );
        let ev = pb::Event {
            r#type: 42,
            resource: Some(pb::event::Resource::Server(proxy("p"))),
        };
        assert_eq!(
            event(ev, NOW, &limits()).unwrap_err().code,
            RejectCode::BadEventType
        );
    }

    #[test]
    fn long_names_are_cut_in_rejections() {
        let r = server(proxy(&"é".repeat(200)), NOW, &limits()).unwrap_err();
        assert!(r.name.chars().count() <= 81);
    }
}
