//! An incident's timeline as server-rendered SVG geometry: the agents
//! stranded and degraded over the incident (step lines drawn from its
//! episodes), its signals as marks under the plot, the start and end as
//! lines. Pure: episodes, signals and a clock in, coordinates and words
//! out; no JavaScript, readable on a phone (the SVG scales to its box).

use std::time::Duration;

use crate::clock::Ts;
use crate::domain::Episode;
use crate::domain::{AgentState, Outcome};
use crate::store::signals::SignalRecord;

use super::fmt;

pub const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 48.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const PLOT_H: f64 = 140.0;
const AXIS_Y: f64 = TOP + PLOT_H + 18.0;
const MARKS_Y: f64 = AXIS_Y + 14.0;
/// Signal marks drawn at most (the newest; the table has them all).
pub const MAX_MARKS: usize = 500;

pub struct Timeline {
    pub width: f64,
    pub height: f64,
    pub x0: f64,
    pub x1: f64,
    pub top: f64,
    pub base: f64,
    pub axis_y: f64,
    pub marks_y: f64,
    /// `points` attributes of the two step lines.
    pub stranded: String,
    pub degraded: String,
    pub ticks: Vec<Tick>,
    /// Count labels on the left axis.
    pub levels: Vec<Tick>,
    pub start_x: f64,
    /// `None` while the incident is open.
    pub end_x: Option<f64>,
    pub marks: Vec<Mark>,
    /// For screen readers: what the picture shows.
    pub summary: String,
}

pub struct Tick {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

pub struct Mark {
    pub x: f64,
    /// acked | failed | pending
    pub class: &'static str,
    pub tip: String,
}

/// Five time labels from `from` to `to`, at height `y`.
fn ticks(from: Ts, to: Ts, y: f64, x: impl Fn(Ts) -> f64) -> Vec<Tick> {
    (0..=4)
        .map(|i| {
            let t = from.saturating_add(to.since(from) * i / 4);
            Tick {
                x: x(t),
                y,
                label: fmt::hms(t),
            }
        })
        .collect()
}

/// Draws the incident from `started` to `ended` (or `now`), with a margin
/// of a tenth on both sides.
pub fn timeline(
    started: Ts,
    ended: Option<Ts>,
    now: Ts,
    episodes: &[Episode],
    signals: &[SignalRecord],
) -> Timeline {
    let end = ended.unwrap_or(now).max(started);
    let span = end.since(started).max(Duration::from_secs(10));
    let margin = span / 10;
    let (from, to) = (started.saturating_sub(margin), end.saturating_add(margin));
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let total_us = to.since(from).as_micros().max(1) as f64;
    let x = |t: Ts| x0 + (x1 - x0) * (t.since(from).as_micros() as f64 / total_us).clamp(0.0, 1.0);

    // (time, state slot, +1/-1), then the counts walked in time order.
    let mut steps: Vec<(Ts, usize, i32)> = Vec::with_capacity(episodes.len() * 2);
    for e in episodes {
        let slot = match e.state {
            AgentState::Stranded => 0,
            AgentState::Degraded => 1,
            AgentState::Healthy => continue,
        };
        steps.push((e.started_at, slot, 1));
        if let Some(t) = e.ended_at {
            steps.push((t, slot, -1));
        }
    }
    steps.sort_by_key(|s| (s.0, s.2));
    let mut counts = [0i64; 2];
    let mut peaks = [0i64; 2];
    let mut series: [Vec<(Ts, i64)>; 2] = [vec![(from, 0)], vec![(from, 0)]];
    for (t, slot, d) in steps {
        counts[slot] += i64::from(d);
        peaks[slot] = peaks[slot].max(counts[slot]);
        series[slot].push((t, counts[slot].max(0)));
    }
    let peak = peaks[0].max(peaks[1]).max(1);
    let last = ended.map_or(now, |e| e.max(now)).min(to);
    for s in &mut series {
        let v = s.last().map_or(0, |p| p.1);
        s.push((last.max(from), v));
    }
    let base = TOP + PLOT_H;
    let y = |n: i64| base - PLOT_H * (n as f64 / peak as f64);
    let points = |s: &[(Ts, i64)]| {
        let mut out = String::new();
        let mut prev: Option<i64> = None;
        for (t, n) in s {
            let px = x(*t);
            if let Some(p) = prev {
                out.push_str(&format!("{px:.1},{:.1} ", y(p)));
            }
            out.push_str(&format!("{px:.1},{:.1} ", y(*n)));
            prev = Some(*n);
        }
        out.trim_end().to_string()
    };
    let ticks = ticks(from, to, AXIS_Y, x);
    let levels = [peak, peak / 2, 0]
        .into_iter()
        .map(|n| Tick {
            x: x0 - 6.0,
            y: y(n) + 4.0,
            label: n.to_string(),
        })
        .collect();
    let marks: Vec<Mark> = signals
        .iter()
        .take(MAX_MARKS)
        .map(|s| Mark {
            x: x(s.created),
            class: match s.outcome {
                Outcome::Acked => "acked",
                Outcome::Pending | Outcome::Delivered | Outcome::Refused => "pending",
                _ => "failed",
            },
            tip: format!(
                "#{} {} to {} at {}: {}",
                s.id,
                s.kind.as_str(),
                s.agent,
                fmt::hms(s.created),
                s.outcome.as_str()
            ),
        })
        .collect();
    let summary = format!(
        "Timeline from {} to {}: at most {} agents stranded and {} degraded at once; {} signals marked.",
        fmt::hms(started),
        ended.map_or_else(|| "now (still open)".to_string(), fmt::hms),
        peaks[0],
        peaks[1],
        marks.len()
    );
    Timeline {
        width: WIDTH,
        height: HEIGHT,
        x0,
        x1,
        top: TOP,
        base,
        axis_y: AXIS_Y,
        marks_y: MARKS_Y,
        stranded: points(&series[0]),
        degraded: points(&series[1]),
        ticks,
        levels,
        start_x: x(started),
        end_x: ended.map(x),
        marks,
        summary,
    }
}

/// The overview's strip: agents stranded and degraded over the last day,
/// with a band per incident that links to it.
pub struct Strip {
    pub width: f64,
    pub height: f64,
    pub x0: f64,
    pub x1: f64,
    pub top: f64,
    pub base: f64,
    pub stranded: String,
    pub degraded: String,
    pub bands: Vec<Band>,
    pub ticks: Vec<Tick>,
    pub peak: u32,
    pub summary: String,
}

pub struct Band {
    pub x: f64,
    pub w: f64,
    pub href: String,
    pub tip: String,
    pub open: bool,
    /// Planned: drawn apart, never as severe.
    pub planned: bool,
}

const STRIP_H: f64 = 90.0;
const STRIP_PLOT: f64 = 56.0;

/// Draws `points` (a minute apart) and `incidents` between `from` and `to`.
pub fn strip(
    from: Ts,
    to: Ts,
    points: &[crate::store::incidents::Point],
    incidents: &[crate::store::incidents::Incident],
) -> Strip {
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let total_us = to.since(from).as_micros().max(1) as f64;
    let x = |t: Ts| x0 + (x1 - x0) * (t.since(from).as_micros() as f64 / total_us).clamp(0.0, 1.0);
    let peak = points
        .iter()
        .map(|p| p.stranded.max(p.degraded))
        .max()
        .unwrap_or(0)
        .max(1);
    let base = 8.0 + STRIP_PLOT;
    let y = |n: u32| base - STRIP_PLOT * (f64::from(n) / f64::from(peak));
    let line = |f: fn(&crate::store::incidents::Point) -> u32| {
        let mut out = String::new();
        for p in points {
            let (a, b) = (
                x(p.at),
                x(p.at.saturating_add(crate::fleet::model::SAMPLE_EVERY)),
            );
            let v = y(f(p));
            out.push_str(&format!("{a:.1},{v:.1} {b:.1},{v:.1} "));
        }
        out.trim_end().to_string()
    };
    let bands = incidents
        .iter()
        .map(|i| {
            let a = x(i.started.max(from));
            let b = x(i.ended.unwrap_or(to).min(to));
            Band {
                x: a,
                w: (b - a).max(2.0),
                href: format!("/incidents/{}", i.id),
                tip: format!(
                    "Incident {}: {} ({} agents, from {}{})",
                    i.id,
                    i.title,
                    i.agents,
                    fmt::hms(i.started),
                    i.ended
                        .map_or_else(|| ", open".to_string(), |e| format!(" to {}", fmt::hms(e)))
                ),
                open: i.open,
                planned: i.planned.is_some(),
            }
        })
        .collect::<Vec<_>>();
    let ticks = ticks(from, to, STRIP_H - 6.0, x);
    let most = points.iter().map(|p| p.stranded).max().unwrap_or(0);
    let planned = bands.iter().filter(|b| b.planned).count();
    let summary = format!(
        "The last 24 hours: at most {most} agents stranded at once; {} incidents{}.",
        bands.len() - planned,
        if planned > 0 {
            format!(", and {planned} planned")
        } else {
            String::new()
        }
    );
    Strip {
        width: WIDTH,
        height: STRIP_H,
        x0,
        x1,
        top: 8.0,
        base,
        stranded: line(|p| p.stranded),
        degraded: line(|p| p.degraded),
        bands,
        ticks,
        peak,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(state: AgentState, from: i64, to: Option<i64>) -> Episode {
        Episode {
            cluster: "default".into(),
            id: from,
            agent: "a".into(),
            state,
            reasons: vec![],
            cause: None,
            cause_resource: String::new(),
            started_at: Ts(from * 1_000_000),
            ended_at: to.map(|t| Ts(t * 1_000_000)),
            ended_by_signal: None,
            end_reason: None,
            incident: Some(1),
        }
    }

    #[test]
    fn the_lines_step_with_the_episodes_and_stay_inside_the_plot() {
        let eps = [
            ep(AgentState::Stranded, 10, Some(30)),
            ep(AgentState::Stranded, 12, Some(20)),
            ep(AgentState::Degraded, 15, Some(40)),
        ];
        let t = timeline(
            Ts(10_000_000),
            Some(Ts(40_000_000)),
            Ts(50_000_000),
            &eps,
            &[],
        );
        // from 0 to 2 stranded and back to 0: the top of the plot is 2.
        assert!(
            t.stranded.contains(&format!("{:.1}", t.top)),
            "{}",
            t.stranded
        );
        for p in t.stranded.split(' ').chain(t.degraded.split(' ')) {
            let (px, py) = p.split_once(',').expect("x,y");
            let (px, py): (f64, f64) = (px.parse().expect("x"), py.parse().expect("y"));
            assert!(
                (t.x0..=t.x1).contains(&px) && (t.top..=t.base).contains(&py),
                "{p}"
            );
        }
        assert!(t.end_x.is_some_and(|e| e > t.start_x));
        assert!(t.summary.contains("at most 2 agents"), "{}", t.summary);
    }
}
