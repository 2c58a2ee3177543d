//! Counters and duration histograms kept inside the scheduler, so that exporting the usual
//! workqueue metrics needs one `stats()` call per scrape instead of one Python call per event.

/// Upper bounds of the duration buckets, in seconds: controller-runtime's workqueue buckets
/// (`ExponentialBuckets(10e-9, 10, 12)`), 10 ns to 1000 s, written out so that Rust and
/// Python agree on every bit.
pub const BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2, 1e3,
];

/// A Prometheus-style histogram: observations counted in the first bucket whose upper bound
/// is >= the value (values above the last bound only count towards `+Inf`).
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// A histogram as exported: `buckets` holds `(upper_bound, cumulative_count)` pairs, the last
/// one `(+inf, count)`, which is the shape Prometheus exposition expects.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub sum: f64,
    pub count: u64,
}

impl Histogram {
    /// Record one duration in seconds.
    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[i] += 1;
        }
        self.sum += seconds;
        self.count += 1;
    }

    /// The cumulative view of the buckets.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(BUCKETS.len() + 1);
        for (bound, n) in BUCKETS.iter().zip(self.counts) {
            total += n;
            buckets.push((*bound, total));
        }
        buckets.push((f64::INFINITY, self.count));
        HistogramSnapshot {
            buckets,
            sum: self.sum,
            count: self.count,
        }
    }
}

/// Monotonic event counters (they only ever grow).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Every key passed to `add`/`add_many`.
    pub adds: u64,
    /// Adds that found the key already queued (waiting, ready or dirty), so `len` did not grow.
    pub merges: u64,
    /// Requeues that used the failure backoff (`done(failed=True)` without `requeue_after`
    /// on a key that was not dirty): client-go's "rate-limited" adds.
    pub retries: u64,
    /// `done` calls that left the key queued for any reason (dirty, requeue_after, backoff).
    pub requeues: u64,
    /// Keys handed out by `pop`/`pop_many`.
    pub pops: u64,
    /// `done` calls.
    pub done: u64,
    /// `done(failed=True)` calls.
    pub failures: u64,
}

/// A point-in-time view of the scheduler, as returned by `Scheduler::stats`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Ready keys (`workqueue_depth`).
    pub depth: usize,
    /// Keys waiting for a future ready time.
    pub waiting: usize,
    /// Keys handed out and not yet done (dirty ones included).
    pub in_flight: usize,
    /// In-flight keys with a follow-up queued.
    pub dirty: usize,
    /// `depth + waiting + dirty`, the same as `len()`.
    pub len: usize,
    pub counters: Counters,
    /// Seconds the oldest ready key has been ready (0 when none is).
    pub oldest_ready_age: f64,
    /// Seconds the longest-running in-flight key has been running (0 when none is).
    pub longest_running: f64,
    /// Sum of the running seconds of all in-flight keys.
    pub unfinished_work: f64,
    /// Seconds from ready to pop.
    pub queue_duration: HistogramSnapshot,
    /// Seconds from pop to done.
    pub work_duration: HistogramSnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_end_with_inf() {
        let mut h = Histogram::default();
        for v in [0.0, 5e-9, 1e-8, 2e-8, 0.5, 1.0, 1e3, 5e3] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 8);
        assert_eq!(s.buckets.len(), 13);
        assert_eq!(s.buckets[0], (1e-8, 3)); // 0, 5e-9 and 1e-8 (bounds are inclusive)
        assert_eq!(s.buckets[1], (1e-7, 4));
        assert_eq!(s.buckets[8], (1.0, 6));
        assert_eq!(s.buckets[11], (1e3, 7));
        assert_eq!(s.buckets[12], (f64::INFINITY, 8));
        assert!((s.sum - (0.0 + 5e-9 + 1e-8 + 2e-8 + 0.5 + 1.0 + 1e3 + 5e3)).abs() < 1e-9);
    }
}
