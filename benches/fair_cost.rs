//! The fair-groups cost workloads of `benches/test_bench_fair.py` in plain Rust, without the
//! Python layer: for profiling the scheduler itself (`perf record`, `valgrind --tool=cachegrind`),
//! where the Python runs only give totals.
//!
//! ```sh
//! cargo run --release --example fair_cost -- both      # or: off, on
//! ROUNDS=60 ONE_BY_ONE=1 cargo run --release --example fair_cost -- both
//! # with symbols, for perf:
//! cargo build --profile profiling --example fair_cost
//! perf record -e cpu-clock -F 20000 ./target/profiling/examples/fair_cost on
//! ```
//!
//! 100,000 keys queued in 97 groups (a namespace each); every round adds 10,000 new keys in
//! bursts of 100 of one group (`add_many_in`), popping and finishing as many (`pop_many`,
//! `done_many`), or with `ONE_BY_ONE` re-adds, pops and finishes one key at a time. "off"
//! makes the same calls without groups. With "both" the two alternate round by round and the
//! ratio printed is the median of adjacent rounds' ratios (on / off); the first 5 rounds are
//! warm-up. Times are wall time per item, with the test keys' formatting outside the timing.

use _core::scheduler::{Config, Scheduler};
use std::time::Instant;

const GROUPS: usize = 97;
const QUEUED: usize = 100_000;
const ITEMS: usize = 10_000;
const BURST: usize = 100;
const WARMUP: usize = 5;

struct Variant {
    fair: bool,
    scheduler: Scheduler,
    /// Rounds run so far (which keys come next).
    step: usize,
    times: Vec<f64>,
}

fn group_name(g: usize) -> String {
    format!("namespace-{g:02}")
}

fn key(i: usize) -> String {
    format!("namespace-{:02}/object-{i:08}", i % GROUPS)
}

fn variant(fair: bool, groups: &[String]) -> Variant {
    let mut scheduler = Scheduler::new(Config::default()).expect("default config");
    for (g, name) in groups.iter().enumerate() {
        let keys: Vec<String> = (g..QUEUED).step_by(GROUPS).map(key).collect();
        let group = fair.then_some(name.as_str());
        scheduler
            .add_many_in(group, keys.iter().map(String::as_str), 0.0, 0, 0.0)
            .expect("fill");
    }
    Variant {
        fair,
        scheduler,
        step: 0,
        times: Vec::new(),
    }
}

/// One round of bursts; returns nanoseconds per item.
fn bursts(v: &mut Variant, groups: &[String]) -> f64 {
    let bursts: Vec<(usize, Vec<String>)> = (0..ITEMS / BURST)
        .map(|b| {
            let n = v.step * ITEMS / BURST + b;
            let g = n % GROUPS;
            let keys = (0..BURST)
                .map(|k| format!("{}/fresh-{n:08}-{k:03}", groups[g]))
                .collect();
            (g, keys)
        })
        .collect();
    let mut popped: Vec<String> = Vec::with_capacity(BURST);
    let start = Instant::now();
    for (g, keys) in &bursts {
        let group = v.fair.then_some(groups[*g].as_str());
        let s = &mut v.scheduler;
        s.add_many_in(group, keys.iter().map(String::as_str), 0.0, 0, 1.0)
            .expect("add_many");
        popped.clear();
        s.pop_many(BURST, 1.0, |k| popped.push(k.to_owned()))
            .expect("pop_many");
        s.done_many(popped.iter().map(String::as_str), 1.0)
            .expect("done_many");
    }
    start.elapsed().as_nanos() as f64 / ITEMS as f64
}

/// One round of one-by-one cycles over the fill's keys and as many more; returns
/// nanoseconds per item.
fn one_by_one(v: &mut Variant, keys: &[String], groups: &[String]) -> f64 {
    let first = QUEUED + v.step * ITEMS;
    let start = Instant::now();
    for j in first..first + ITEMS {
        let group = v.fair.then_some(groups[j % GROUPS].as_str());
        let s = &mut v.scheduler;
        s.add_in(group, &keys[j % keys.len()], 0.0, 0, 1.0)
            .expect("add");
        let popped = s.pop(1.0).expect("pop").expect("a ready key").to_owned();
        s.done(&popped, None, false, None, 1.0).expect("done");
    }
    start.elapsed().as_nanos() as f64 / ITEMS as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "both".into());
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(40);
    let one = std::env::var_os("ONE_BY_ONE").is_some();
    let groups: Vec<String> = (0..GROUPS).map(group_name).collect();
    let keys: Vec<String> = (0..2 * QUEUED).map(key).collect();
    let mut variants: Vec<Variant> = [false, true]
        .into_iter()
        .filter(|&fair| mode == "both" || (mode == "on") == fair)
        .map(|fair| variant(fair, &groups))
        .collect();
    for round in 0..rounds {
        for v in &mut variants {
            let t = if one {
                one_by_one(v, &keys, &groups)
            } else {
                bursts(v, &groups)
            };
            v.step += 1;
            if round >= WARMUP {
                v.times.push(t);
            }
        }
    }
    for v in &variants {
        let on = if v.fair { "on" } else { "off" };
        let left = v.scheduler.len();
        println!(
            "{on}: median {:.0} ns/item ({left} keys queued)",
            median(v.times.clone())
        );
    }
    if let [off, on] = &variants[..] {
        let ratios = on
            .times
            .iter()
            .zip(&off.times)
            .map(|(a, b)| a / b)
            .collect();
        println!("on/off: {:.3} (median of adjacent rounds)", median(ratios));
    }
}
