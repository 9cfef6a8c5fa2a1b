//! Times to recover, in fixed memory: a log-linear histogram (16 buckets
//! per power of two, so any value is within 1/32 of its bucket's middle)
//! with the exact maximum. An incident that recovers millions of agents
//! keeps the same 4 KiB as one that recovers three, and still tells its
//! median and its slowest. Pure arithmetic; owns nothing else.

/// Buckets: 16 exact ones below 16, then 16 per power of two up to 2^63.
const SUB: u32 = 16;
const BUCKETS: usize = (SUB as usize) + 60 * (SUB as usize);

#[derive(Clone, Debug)]
pub struct Recoveries {
    counts: Box<[u32; BUCKETS]>,
    n: u64,
    min: u64,
    max: u64,
}

impl Default for Recoveries {
    fn default() -> Self {
        Recoveries {
            counts: Box::new([0; BUCKETS]),
            n: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < u64::from(SUB) {
        return v as usize;
    }
    let exp = 63 - v.leading_zeros(); // ≥ 4
    let sub = (v >> (exp - 4)) - u64::from(SUB);
    SUB as usize + (exp as usize - 4) * SUB as usize + sub as usize
}

/// The smallest value in bucket `i`, and the bucket's width.
fn bounds(i: usize) -> (u64, u64) {
    if i < SUB as usize {
        return (i as u64, 1);
    }
    let j = i - SUB as usize;
    let shift = (j / SUB as usize) as u32;
    let sub = (j % SUB as usize) as u64;
    ((u64::from(SUB) + sub) << shift, 1u64 << shift)
}

impl Recoveries {
    /// One time to recover, in µs (negative counts as 0).
    pub fn record(&mut self, us: i64) {
        let v = u64::try_from(us).unwrap_or(0);
        let c = &mut self.counts[index(v)];
        *c = c.saturating_add(1);
        self.n = self.n.saturating_add(1);
        self.max = self.max.max(v);
        self.min = self.min.min(v);
    }

    /// The lower median (the `(n-1)/2`-th smallest), within 1/32 of it,
    /// never outside the least and the greatest (so exact when all are
    /// one value).
    pub fn p50(&self) -> Option<i64> {
        if self.n == 0 {
            return None;
        }
        let rank = (self.n - 1) / 2;
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += u64::from(*c);
            if seen > rank {
                let (lo, width) = bounds(i);
                let mid = lo.saturating_add(width / 2).clamp(self.min, self.max);
                return Some(i64::try_from(mid).unwrap_or(i64::MAX));
            }
        }
        Some(self.max())
    }

    pub fn max(&self) -> i64 {
        i64::try_from(self.max).unwrap_or(i64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for v in (0..5000u64).chain([u64::MAX, u64::MAX / 3, 1 << 40, (1 << 40) - 1]) {
            let i = index(v);
            assert!(i < BUCKETS, "{v}");
            let (lo, w) = bounds(i);
            assert!(lo <= v && v - lo < w, "{v} in [{lo}, +{w})");
            if v < 5000 {
                assert!(i >= last);
                last = i;
            }
        }
    }

    #[test]
    fn the_median_is_close_and_the_max_exact_in_fixed_memory() {
        let mut r = Recoveries::default();
        assert_eq!(r.p50(), None);
        let mut exact = Vec::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = (x % 600_000_000) as i64; // up to 10 minutes in µs
            r.record(v);
            exact.push(v);
        }
        exact.sort_unstable();
        let want = exact[(exact.len() - 1) / 2];
        let got = r.p50().unwrap();
        assert!(
            (got - want).abs() as f64 <= want as f64 / 16.0,
            "p50 {got} against {want}"
        );
        assert_eq!(r.max(), *exact.last().unwrap());
        assert_eq!(r.n, 100_000);
        let mut one = Recoveries::default();
        one.record(3_000_000);
        assert_eq!(one.max(), 3_000_000);
        assert!((one.p50().unwrap() - 3_000_000).abs() <= 3_000_000 / 32);
        one.record(-5);
        assert_eq!(one.n, 2);
        assert_eq!(std::mem::size_of_val(&*one.counts), BUCKETS * 4);
    }
}
