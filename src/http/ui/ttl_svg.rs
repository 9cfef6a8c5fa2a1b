//! The TTL-window timeline as server-rendered SVG geometry: one row per
//! resource, a bar from its last heartbeat to its expiry, a "now" line in
//! the middle. Pure: windows and a clock in, coordinates and words out, so
//! the picture is testable without a browser and costs one pass to draw.

use crate::clock::Ts;
use crate::domain::Kind;
use crate::fleet::view::TtlWindow;

use super::fmt;

/// viewBox width; the SVG scales to its container.
pub const WIDTH: f64 = 960.0;
const LABEL_W: f64 = 200.0;
const STATUS_W: f64 = 150.0;
const AXIS_H: f64 = 24.0;
const ROW_H: f64 = 26.0;
const BAR_H: f64 = 14.0;
/// Names longer than this are cut in the picture (the tooltip has them whole).
const LABEL_CHARS: usize = 26;

pub struct Svg {
    pub width: f64,
    pub height: f64,
    pub plot_x0: f64,
    pub plot_x1: f64,
    pub plot_w: f64,
    pub bar_h: f64,
    pub now_x: f64,
    pub now_ms: i64,
    pub axis_y: f64,
    pub ticks: Vec<Tick>,
    pub rows: Vec<Row>,
    /// For screen readers: what the picture shows.
    pub summary: String,
}

pub struct Tick {
    pub x: f64,
    pub label: String,
}

pub struct Row {
    /// A DOM id, stable across renders (focus survives a live update).
    pub id: String,
    pub name: String,
    pub label: String,
    pub kind: &'static str,
    pub href: String,
    pub y: f64,
    pub text_y: f64,
    pub bar_x: f64,
    pub bar_w: f64,
    pub bar_y: f64,
    /// live | soon | expired | stale
    pub class: &'static str,
    pub icon: &'static str,
    pub status: String,
    pub expires_ms: i64,
    /// Last heartbeat, TTL, expires, heartbeats missed.
    pub tip: String,
    /// The bar runs past the left or right edge of the window.
    pub cut_left: bool,
    pub cut_right: bool,
}

fn kind_label(k: Kind) -> &'static str {
    match k {
        Kind::Proxy => "proxy",
        Kind::AuthServer => "auth",
        Kind::Agent => "agent",
        Kind::TunnelConnection => "tunnel",
    }
}

fn href(k: Kind, name: &str) -> String {
    match k {
        Kind::Agent => fmt::agent_href(name),
        Kind::Proxy => format!("/agents?proxy={}", fmt::enc(name)),
        Kind::AuthServer => format!("/auth#auth-{}", fmt::enc(name)),
        Kind::TunnelConnection => String::new(),
    }
}

fn cut(name: &str) -> String {
    if name.chars().count() <= LABEL_CHARS {
        name.to_string()
    } else {
        let mut s: String = name.chars().take(LABEL_CHARS - 1).collect();
        s.push('…');
        s
    }
}

/// Lays out `windows` around `now`. The window spans the longest TTL on
/// either side of now (at least 10 s), so every live bar ends right of the
/// line and a bar that just expired is still visible left of it.
pub fn build(windows: &[TtlWindow], now: Ts) -> Svg {
    let span_ms = windows
        .iter()
        .map(|w| w.ttl_ms)
        .max()
        .unwrap_or(0)
        .max(10_000) as f64;
    let now_ms = now.as_millis();
    let start = now_ms as f64 - span_ms;
    let end = now_ms as f64 + span_ms;
    let x0 = LABEL_W;
    let x1 = WIDTH - STATUS_W;
    let x = |ms: f64| x0 + (ms.clamp(start, end) - start) / (end - start) * (x1 - x0);

    let ticks = [-1.0, -0.5, 0.0, 0.5, 1.0]
        .iter()
        .map(|f: &f64| {
            let off = f * span_ms;
            Tick {
                x: x(now_ms as f64 + off),
                label: if *f == 0.0 {
                    "now".to_string()
                } else if off < 0.0 {
                    format!("−{}", fmt::ms(-off as i64))
                } else {
                    format!("+{}", fmt::ms(off as i64))
                },
            }
        })
        .collect();

    let mut expired = 0;
    let rows = windows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let y = AXIS_H + i as f64 * ROW_H;
            let last = w.last_heartbeat_at.as_millis() as f64;
            let exp = w.expires_at.as_millis() as f64;
            let (bx0, bx1) = (x(last), x(exp));
            let (class, icon) = if w.stale {
                ("stale", "…")
            } else if w.expired {
                expired += 1;
                ("expired", "✕")
            } else if w.remaining_ms * 4 < w.ttl_ms {
                ("soon", "◐")
            } else {
                ("live", "✓")
            };
            let kind = kind_label(w.kind);
            let tip = format!(
                "{kind} {}: last heartbeat {} · TTL {} · expires {} ({}) · heartbeats missed {}{}",
                w.name,
                fmt::hms(w.last_heartbeat_at),
                fmt::ms(w.ttl_ms),
                fmt::hms(w.expires_at),
                fmt::left(now, w.expires_at),
                w.heartbeats_missed,
                if w.stale { " · data stale" } else { "" },
            );
            Row {
                id: format!("ttl-{kind}-{}", fmt::enc(&w.name)),
                name: w.name.clone(),
                label: cut(&w.name),
                kind,
                href: href(w.kind, &w.name),
                y,
                text_y: y + ROW_H / 2.0 + 4.0,
                bar_x: bx0,
                bar_w: (bx1 - bx0).max(2.0),
                bar_y: y + (ROW_H - BAR_H) / 2.0,
                class,
                icon,
                status: fmt::left(now, w.expires_at),
                expires_ms: w.expires_at.as_millis(),
                tip,
                cut_left: last < start,
                cut_right: exp > end,
            }
        })
        .collect::<Vec<_>>();
    let n = rows.len();
    Svg {
        width: WIDTH,
        height: AXIS_H + n as f64 * ROW_H + 4.0,
        plot_x0: x0,
        plot_x1: x1,
        plot_w: x1 - x0,
        bar_h: BAR_H,
        now_x: x(now_ms as f64),
        now_ms,
        axis_y: AXIS_H - 8.0,
        ticks,
        rows,
        summary: format!(
            "TTL windows of {n} resources, {expired} expired; each bar runs from the last heartbeat to the expiry, the line is now"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Kind;

    fn w(name: &str, last_s: i64, ttl_s: i64, expired: bool) -> TtlWindow {
        let now = 1_000_000;
        TtlWindow {
            cluster: "default".into(),
            kind: Kind::Proxy,
            name: name.into(),
            last_heartbeat_at: Ts((now + last_s * 1000) * 1000),
            ttl_ms: ttl_s * 1000,
            expires_at: Ts((now + (last_s + ttl_s) * 1000) * 1000),
            remaining_ms: (last_s + ttl_s) * 1000,
            expired,
            stale: false,
            heartbeat_interval_ms: [0, 0],
            next_heartbeat_due_at: Ts(0),
            heartbeats_seen: 3,
            heartbeats_missed: if expired { 2 } else { 0 },
        }
    }

    #[test]
    fn bars_sit_around_the_now_line() {
        let now = Ts(1_000_000 * 1000);
        let svg = build(
            &[
                w("fresh", -1, 30, false),
                w("dead", -40, 30, true),
                w("old", -100, 30, true),
            ],
            now,
        );
        assert_eq!(svg.rows.len(), 3);
        let mid = (svg.plot_x0 + svg.plot_x1) / 2.0;
        assert!((svg.now_x - mid).abs() < 1e-9);
        let fresh = &svg.rows[0];
        assert!(fresh.bar_x < svg.now_x && fresh.bar_x + fresh.bar_w > svg.now_x);
        assert_eq!(fresh.class, "live");
        assert_eq!(fresh.status, "29 s left");
        let dead = &svg.rows[1];
        assert_eq!(dead.class, "expired");
        assert!(dead.bar_x + dead.bar_w <= svg.now_x + 1e-9);
        assert!(dead.cut_left, "a heartbeat 40 s ago is past a 30 s window");
        assert!(dead.tip.contains("heartbeats missed 2"));
        assert!(dead.tip.contains("expired 10 s ago"));
        // Entirely out of the window: a sliver at the left edge, still marked.
        let old = &svg.rows[2];
        assert!(old.bar_w >= 2.0 && old.bar_x <= svg.plot_x0 + 1e-9);
        assert!(svg.summary.contains("2 expired"));
        assert_eq!(svg.ticks[2].label, "now");
    }

    #[test]
    fn long_names_are_cut_in_the_picture_only() {
        let long = "p".repeat(100);
        let svg = build(&[w(&long, -1, 30, false)], Ts(1_000_000 * 1000));
        assert_eq!(svg.rows[0].label.chars().count(), LABEL_CHARS);
        assert_eq!(svg.rows[0].name, long);
        assert!(svg.rows[0].tip.contains(&long));
    }
}
