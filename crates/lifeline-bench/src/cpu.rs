//! CPU time of the bench's two processes, Lifeline's and the simulated
//! cluster's, read from `/proc`: what a comparison's legs spent, told
//! apart. Reads only; no figure here is a target.

use serde_json::{json, Value};

use super::{median, thousandths};

/// CPU time (user and system, every thread's, ended ones too) of
/// Lifeline's process, the bench's own, and of the simulated cluster's,
/// which shares the machine's cores with it.
#[derive(Clone, Copy)]
pub(super) struct Cpu {
    lifeline_ms: f64,
    cluster_ms: f64,
}

impl Cpu {
    /// Both processes' CPU time so far; None where `/proc` does not say.
    pub(super) fn now(cluster: Option<u32>) -> Option<Cpu> {
        let read = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
        Some(Cpu {
            lifeline_ms: stat_cpu_ms(&read("self")?)?,
            cluster_ms: stat_cpu_ms(&read(&cluster?.to_string())?)?,
        })
    }

    pub(super) fn since(self, before: Cpu) -> Cpu {
        Cpu {
            lifeline_ms: self.lifeline_ms - before.lifeline_ms,
            cluster_ms: self.cluster_ms - before.cluster_ms,
        }
    }
}

/// `utime` + `stime` of a `/proc/<pid>/stat` line, in ms. Both count in
/// `USER_HZ`, which Linux fixes at 100 per second for this file. The
/// process name may hold spaces and parentheses: the fields are counted
/// from the last `)`.
fn stat_cpu_ms(stat: &str) -> Option<f64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime.saturating_add(stime) as f64 * 10.0)
}

/// Where a comparison's CPU time went: Lifeline's process and the
/// simulated cluster's, per source, and how Lifeline's own compares.
pub(super) fn cpu_json(rounds: &[[Cpu; 2]]) -> Value {
    let of = |i: usize, f: fn(&Cpu) -> f64| -> Vec<f64> {
        rounds.iter().map(|r| f(&r[i]).round()).collect()
    };
    let ratios: Vec<f64> = rounds
        .iter()
        .map(|[l, t]| thousandths(l.lifeline_ms / t.lifeline_ms.max(1.0)))
        .collect();
    json!({
        "lifeline_process": {
            "lifeline": of(0, |c| c.lifeline_ms),
            "teleport": of(1, |c| c.lifeline_ms),
        },
        "cluster_process": {
            "lifeline": of(0, |c| c.cluster_ms),
            "teleport": of(1, |c| c.cluster_ms),
        },
        "lifeline_process_ratio": thousandths(median(&ratios)),
        "lifeline_process_round_ratios": ratios,
        "note": "CPU time during each cold resync (10 ms ticks): Lifeline's process, and the simulated cluster's, which runs on the same cores; lifeline_process_ratio is the median of the rounds' ratios of Lifeline's CPU, lifeline source over teleport source",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_process_name_whatever_it_holds() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt
        // cminflt majflt cmajflt utime stime …
        let stat = "4358 (a) b) (c) R 1 2 3 4 5 6 7 8 9 10 123 45 0 0 20 0 9";
        assert_eq!(stat_cpu_ms(stat), Some(1680.0));
        assert_eq!(
            stat_cpu_ms(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
                .map(|ms| ms >= 0.0),
            Some(true)
        );
    }

    #[test]
    fn a_stat_line_cut_short_or_garbled_tells_nothing() {
        assert_eq!(stat_cpu_ms(""), None);
        assert_eq!(stat_cpu_ms("4358 (lifeline) R 1 2 3"), None);
        assert_eq!(stat_cpu_ms("4358 (x) R 1 2 3 4 5 6 7 8 9 10 -1 45"), None);
    }
}
