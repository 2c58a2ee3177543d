//! The Scheduler binding's answers as Python dicts: its defaults, stats (with their
//! histograms), a key's inspection and the queue summary. Each is built after the
//! scheduler's lock is released.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::scheduler::{Config, HistogramSnapshot, KeyInspection, QueueSummary, Stats};

/// `Config::default` as the keywords of `Scheduler()`, for Python code that needs to know
/// them without writing them again (`debounce_max` is `None`: 10 × `debounce`).
pub(crate) fn scheduler_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let Config {
        concurrency,
        debounce,
        debounce_max,
        max_wait,
        backoff_base,
        backoff_max,
        seed: _,
        group_concurrency,
    } = Config::default();
    let d = PyDict::new(py);
    d.set_item("concurrency", concurrency)?;
    d.set_item("debounce", debounce)?;
    d.set_item("debounce_max", debounce_max)?;
    d.set_item("max_wait", max_wait)?;
    d.set_item("backoff_base", backoff_base)?;
    d.set_item("backoff_max", backoff_max)?;
    d.set_item("group_concurrency", group_concurrency)?;
    // Not `Config::default().seed`: from Python, no seed means a random one.
    d.set_item("seed", py.None())?;
    // No weights set: every fair group has weight 1.
    d.set_item("group_weights", py.None())?;
    Ok(d)
}

pub(super) fn histogram<'py>(
    py: Python<'py>,
    h: &HistogramSnapshot,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let buckets = h
        .buckets
        .iter()
        .map(|&(bound, n)| {
            PyTuple::new(
                py,
                [
                    bound.into_pyobject(py)?.into_any(),
                    n.into_pyobject(py)?.into_any(),
                ],
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("buckets", PyList::new(py, buckets)?)?;
    d.set_item("sum", h.sum)?;
    d.set_item("count", h.count)?;
    Ok(d)
}

/// `Scheduler.inspect`'s dict.
pub(super) fn inspection<'py>(py: Python<'py>, i: &KeyInspection) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("state", i.state.as_str())?;
    d.set_item("priority", i.priority)?;
    d.set_item("failures", i.failures)?;
    d.set_item("backoff", i.backoff)?;
    d.set_item("ready_at", i.ready_at)?;
    d.set_item("since", i.since)?;
    d.set_item("ahead_at_priority", i.ahead_at_priority)?;
    d.set_item("ahead_higher", i.ahead_higher)?;
    d.set_item("follow_up_priority", i.follow_up_priority)?;
    d.set_item("ahead_in_group", i.ahead_in_group)?;
    d.set_item("group", &i.group)?;
    d.set_item("held", i.held)?;
    d.set_item("group_concurrency", i.group_concurrency)?;
    Ok(d)
}

/// `Scheduler.queue_summary`'s dict.
pub(super) fn summary<'py>(py: Python<'py>, q: &QueueSummary) -> PyResult<Bound<'py, PyDict>> {
    let by_priority = |levels: &[(i64, usize)]| -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for &(p, n) in levels {
            d.set_item(p, n)?;
        }
        Ok(d)
    };
    let d = PyDict::new(py);
    d.set_item("ready", q.ready)?;
    d.set_item("waiting", q.waiting)?;
    d.set_item("in_flight", q.in_flight)?;
    d.set_item("dirty", q.dirty)?;
    d.set_item("concurrency", q.concurrency)?;
    d.set_item("group_concurrency", q.group_concurrency)?;
    d.set_item("ready_by_priority", by_priority(&q.ready_by_priority)?)?;
    d.set_item(
        "in_flight_by_priority",
        by_priority(&q.in_flight_by_priority)?,
    )?;
    let oldest = match &q.oldest_ready {
        Some(o) => {
            let e = PyDict::new(py);
            e.set_item("key", &o.key)?;
            e.set_item("priority", o.priority)?;
            e.set_item("since", o.since)?;
            e.set_item("group", &o.group)?;
            e.into_any()
        }
        None => py.None().into_bound(py),
    };
    d.set_item("oldest_ready", oldest)?;
    d.set_item("next_ready_at", q.next_ready_at)?;
    d.set_item("now", q.now)?;
    let by_group = PyDict::new(py);
    for g in &q.by_group {
        let e = PyDict::new(py);
        e.set_item("keys", g.keys)?;
        e.set_item("ready", g.ready)?;
        e.set_item("in_flight", g.in_flight)?;
        e.set_item("weight", g.weight)?;
        e.set_item("group_concurrency", g.group_concurrency)?;
        e.set_item("held", g.held)?;
        by_group.set_item(&g.group, e)?;
    }
    d.set_item("by_group", by_group)?;
    Ok(d)
}

/// `Scheduler.stats`'s dict.
pub(super) fn stats<'py>(py: Python<'py>, s: &Stats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("depth", s.depth)?;
    d.set_item("waiting", s.waiting)?;
    d.set_item("in_flight", s.in_flight)?;
    d.set_item("dirty", s.dirty)?;
    d.set_item("len", s.len)?;
    let c = &s.counters;
    d.set_item("adds_total", c.adds)?;
    d.set_item("merges_total", c.merges)?;
    d.set_item("retries_total", c.retries)?;
    d.set_item("requeues_total", c.requeues)?;
    d.set_item("pops_total", c.pops)?;
    d.set_item("done_total", c.done)?;
    d.set_item("failures_total", c.failures)?;
    d.set_item("oldest_ready_age", s.oldest_ready_age)?;
    d.set_item("longest_running", s.longest_running)?;
    d.set_item("unfinished_work", s.unfinished_work)?;
    d.set_item("queue_duration", histogram(py, &s.queue_duration)?)?;
    d.set_item("work_duration", histogram(py, &s.work_duration)?)?;
    Ok(d)
}
