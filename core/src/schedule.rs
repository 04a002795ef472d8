//! The open-loop schedule (docs/architecture.md, measurement rule 1), bit for bit the
//! Python engine's: `records/intended.py` for the intended times, and the interleaved
//! order and wake-up margin of `workload/publish_loop.py`.

/// Intended send time of message `seq` of publisher `publisher` (`records.intended.intended_ns`):
/// `start + int(float(seq * n + p) * 1e9 / (rate * n))`, the same IEEE operations in the
/// same order, truncated toward zero.
#[inline]
pub fn intended_ns(start_ns: i64, rate: f64, publishers: i64, publisher: i64, seq: i64) -> i64 {
    let k = (seq * publishers + publisher) as f64;
    start_ns + (k * 1e9 / (rate * publishers as f64)) as i64
}

/// Due messages of publishers `[first, last)` out of `publishers`, in intended order.
pub struct Schedule {
    pub start_ns: i64,
    pub rate: f64,
    pub publishers: i64,
    pub first: i64,
    pub last: i64,
    pub messages_per_publisher: i64,
    publisher: i64,
    seq: i64,
}

impl Schedule {
    pub fn new(
        start_ns: i64,
        rate: f64,
        publishers: i64,
        first: i64,
        last: i64,
        messages_per_publisher: i64,
    ) -> Self {
        Schedule {
            start_ns,
            rate,
            publishers,
            first,
            last,
            messages_per_publisher,
            publisher: first,
            seq: 0,
        }
    }

    #[inline]
    pub fn finished(&self) -> bool {
        self.first >= self.last || self.seq >= self.messages_per_publisher
    }

    #[inline]
    pub fn next_due_ns(&self) -> i64 {
        intended_ns(self.start_ns, self.rate, self.publishers, self.publisher, self.seq)
    }

    #[inline]
    pub fn current(&self) -> (i64, i64) {
        (self.publisher, self.seq)
    }

    #[inline]
    pub fn advance(&mut self) {
        self.publisher += 1;
        if self.publisher == self.last {
            self.publisher = self.first;
            self.seq += 1;
        }
    }

    /// The busy-wait cap (`publish_loop.spin_cap_ns`): `spin_ns`, and within it the larger
    /// of 5 % of this worker's mean send period and 50 µs, the latter only up to 20 % of it.
    pub fn spin_cap_ns(&self, spin_ns: i64) -> i64 {
        spin_cap_ns(spin_ns, self.rate * (self.last - self.first) as f64)
    }
}

pub const SPIN_SHARE: f64 = 0.05;
pub const WAKE_COVER_NS: f64 = 50_000.0;
pub const WAKE_COVER_SHARE: f64 = 0.2;

/// `publish_loop.spin_cap_ns`, the same IEEE operations in the same order.
pub fn spin_cap_ns(spin_ns: i64, local_rate: f64) -> i64 {
    if local_rate <= 0.0 {
        return spin_ns.max(0);
    }
    let period = 1e9 / local_rate;
    let cover = (SPIN_SHARE * period).max(WAKE_COVER_NS.min(WAKE_COVER_SHARE * period));
    ((spin_ns as f64).min(cover) as i64).max(0)
}

/// How early to arm the timer (`publish_loop.WakeMargin`): the 90th percentile of the last
/// 64 observed overshoots, capped.
pub struct WakeMargin {
    pub cap_ns: i64,
    pub value_ns: i64,
    samples: Vec<i64>,
    next: usize,
    seen: u64,
}

const WINDOW: usize = 64;
const QUANTILE: f64 = 0.9;

impl WakeMargin {
    pub fn new(cap_ns: i64) -> Self {
        let cap = cap_ns.max(0);
        WakeMargin { cap_ns: cap, value_ns: cap.min(20_000), samples: Vec::new(), next: 0, seen: 0 }
    }

    pub fn observe(&mut self, overshoot_ns: i64) {
        let sample = overshoot_ns.max(0);
        if self.samples.len() < WINDOW {
            self.samples.push(sample);
        } else {
            self.samples[self.next] = sample;
            self.next = (self.next + 1) % WINDOW;
        }
        self.seen += 1;
        if self.seen % 16 == 0 || self.seen == 4 {
            let mut ordered = self.samples.clone();
            ordered.sort_unstable();
            let at = ((QUANTILE * ordered.len() as f64) as usize).min(ordered.len() - 1);
            self.value_ns = self.cap_ns.min(ordered[at]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intended_times_match_the_python_formula() {
        // int(float(3 * 7 + 2) * 1e9 / (10.0 * 7)) == 328571428
        assert_eq!(intended_ns(0, 10.0, 7, 2, 3), 328_571_428);
        assert_eq!(intended_ns(5, 0.3, 3, 1, 0), 5 + 1_111_111_111);
    }

    #[test]
    fn the_schedule_interleaves_publishers_in_intended_order() {
        let mut s = Schedule::new(0, 10.0, 4, 1, 3, 2);
        let mut seen = Vec::new();
        while !s.finished() {
            seen.push(s.current());
            s.advance();
        }
        assert_eq!(seen, vec![(1, 0), (2, 0), (1, 1), (2, 1)]);
    }

    #[test]
    fn the_spin_cap_is_a_share_of_the_period_covering_a_real_time_wake_up() {
        for (rate, cap) in [
            (100.0, 500_000),
            (1000.0, 50_000),
            (4000.0, 50_000),
            (10_000.0, 20_000),
            (20_000.0, 10_000),
        ] {
            assert_eq!(spin_cap_ns(1_000_000, rate), cap, "{rate} msg/s");
        }
        assert_eq!(spin_cap_ns(30_000, 4000.0), 30_000);
        assert_eq!(Schedule::new(0, 1000.0, 20, 0, 4, 1).spin_cap_ns(1_000_000), 50_000);
    }

    #[test]
    fn the_margin_follows_the_overshoots_below_its_cap() {
        let mut m = WakeMargin::new(50_000);
        assert_eq!(m.value_ns, 20_000);
        for _ in 0..4 {
            m.observe(7_000);
        }
        assert_eq!(m.value_ns, 7_000);
        for _ in 0..12 {
            m.observe(90_000);
        }
        assert_eq!(m.value_ns, 50_000);
    }
}
