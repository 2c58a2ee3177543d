//! The Python binding: `fastctl._core.Scheduler`, a thin wrapper over
//! `crate::scheduler::Scheduler`.
//!
//! Its only jobs are converting arguments (refusing non-`str` keys with a `TypeError` that
//! names the type), reading the clock when `now` is not given, locking, and mapping errors to
//! Python exceptions. Everything that touches Python (argument extraction, reading
//! `time.monotonic`, building results, formatting errors) happens before the lock is taken or
//! after it is released, so a finalizer or another thread can never deadlock on it.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyKeyError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::{MutexExt, PyOnceLock};
use pyo3::types::{PyDict, PyList, PyMapping, PyString, PyTuple};

use crate::clock;
use crate::scheduler::{
    Config, Error, HistogramSnapshot, KeyInspection, QueueSummary, Scheduler, MAX_DELAY,
    MAX_GROUP_CONCURRENCY, MAX_WEIGHT,
};

/// A keyed priority/delay scheduler: one record per key, never two hand-outs of a key at once.
///
/// See docs/scheduler.md for the full semantics.
#[pyclass(frozen, name = "Scheduler", module = "fastctl._core")]
pub struct PyScheduler {
    inner: Mutex<Scheduler>,
    /// Called with no arguments after `set_group_concurrency`, which may release a held
    /// group: the applier running on this scheduler sleeps until something wakes it, and
    /// it knows of its own calls only (`_set_waker`).
    waker: Mutex<Option<Py<PyAny>>>,
}

/// The key as `&str`, or a `TypeError` naming what was passed instead.
fn key_str<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a str> {
    match obj.cast::<PyString>() {
        Ok(s) => s.to_str(),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be str, not {}",
            type_name(obj)
        ))),
    }
}

/// The fair group: `None`, or a `str` (a `TypeError` naming what was passed instead).
#[inline]
fn group_str<'a>(obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => match o.cast::<PyString>() {
            Ok(s) => s.to_str().map(Some),
            Err(_) => Err(PyTypeError::new_err(format!(
                "group must be str or None, not {}",
                type_name(o)
            ))),
        },
    }
}

/// A group weight: an int in [1, MAX_WEIGHT], else a `ValueError` naming the group.
fn weight_u32(group: &str, weight: i64) -> PyResult<u32> {
    u32::try_from(weight)
        .ok()
        .filter(|&w| w >= 1)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "weight of group {group:?} must be an int in [1, {MAX_WEIGHT}], got {weight}"
            ))
        })
}

/// The items of an iterable of keys (refusing a `str`, which would iterate as characters),
/// for a batched call named `call`.
fn key_items<'py>(keys: &Bound<'py, PyAny>, call: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if keys.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{call}() takes an iterable of str keys, not a str"
        )));
    }
    keys.try_iter()?.collect()
}

/// Every item as `&str`, or a `TypeError` naming the first that is not a `str` and its
/// index. The message is built only on that error: formatting it per key cost more than
/// the scheduler's own work per key.
fn key_strs<'a>(items: &'a [Bound<'_, PyAny>], call: &str) -> PyResult<Vec<&'a str>> {
    let mut strs = Vec::with_capacity(items.len());
    for (i, obj) in items.iter().enumerate() {
        match obj.cast::<PyString>() {
            Ok(s) => strs.push(s.to_str()?),
            Err(_) => return Err(key_str(obj, &format!("{call}() key at index {i}")).unwrap_err()),
        }
    }
    Ok(strs)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// `now`, or the monotonic clock (the one `time.monotonic()` reads).
fn resolve_now(py: Python<'_>, now: Option<f64>) -> PyResult<f64> {
    if let Some(now) = now {
        return Ok(now);
    }
    if let Some(now) = clock::monotonic() {
        return Ok(now);
    }
    static MONOTONIC: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    MONOTONIC
        .import(py, "time", "monotonic")?
        .call0()?
        .extract()
}

/// `now`, or the clock a query reads: the running event loop's `time()` when this thread runs
/// one, else the monotonic clock. A query (`stats`, `inspect`, `queue_summary`) moves the
/// scheduler's clock to the time it is asked at, so one asked on a loop whose time is virtual
/// must not read the real clock: that would move the clock past every virtual ready time for
/// good. Updates (`add`, `pop`, `done`) keep reading the monotonic clock without calling into
/// Python: they are the hot path, and the runtime gives them `now` from its loop.
fn resolve_query_now(py: Python<'_>, now: Option<f64>) -> PyResult<f64> {
    if let Some(now) = now {
        return Ok(now);
    }
    static RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let running = RUNNING_LOOP
        .import(py, "asyncio", "_get_running_loop")?
        .call0()?;
    if running.is_none() {
        return resolve_now(py, None);
    }
    running.call_method0(pyo3::intern!(py, "time"))?.extract()
}

/// Map a core error to the Python exception users expect; `key` is the Python key object,
/// for a message that shows it as Python would.
fn to_py_err(err: Error, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    match err {
        Error::InvalidDelay { .. } | Error::InvalidTime(_) | Error::InvalidConfig { .. } => {
            PyValueError::new_err(err.to_string())
        }
        Error::NotInFlight(k) => not_in_flight("done", &k, key),
        Error::TooManyKeys => PyMemoryError::new_err(err.to_string()),
    }
}

/// The `KeyError` of `call` for a key not in flight, showing the key as Python would.
fn not_in_flight(call: &str, k: &str, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    let shown = key
        .and_then(|k| k.repr().ok())
        .map_or_else(|| format!("{k:?}"), |r| r.to_string());
    PyKeyError::new_err(format!("{call}(): key {shown} is not in flight"))
}

/// `group_concurrency`: an int in [0, MAX_GROUP_CONCURRENCY] (not a bool: `True` would read
/// as a cap of 1), else a `ValueError` naming the parameter.
fn group_cap(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    let refuse = || {
        let shown = obj
            .repr()
            .map_or_else(|_| "?".to_owned(), |r| r.to_string());
        PyValueError::new_err(format!(
            "group_concurrency must be an int in [0, {MAX_GROUP_CONCURRENCY}] or None \
             (0 or None: no cap), got {shown}"
        ))
    };
    if obj.is_instance_of::<pyo3::types::PyBool>() || !obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(refuse());
    }
    obj.extract::<u64>()
        .ok()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= MAX_GROUP_CONCURRENCY)
        .ok_or_else(refuse)
}

fn non_negative_int(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("{name} must be an int >= 0, got {value}")))
}

/// `Config::default` as the keywords of `Scheduler()`, for Python code that needs to know
/// them without writing them again (`debounce_max` is `None`: 10 × `debounce`).
fn scheduler_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
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

fn histogram<'py>(py: Python<'py>, h: &HistogramSnapshot) -> PyResult<Bound<'py, PyDict>> {
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
fn inspection<'py>(py: Python<'py>, i: &KeyInspection) -> PyResult<Bound<'py, PyDict>> {
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
fn summary<'py>(py: Python<'py>, q: &QueueSummary) -> PyResult<Bound<'py, PyDict>> {
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

impl PyScheduler {
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Scheduler>> {
        // Detaches from the interpreter while waiting, so a free-threaded stop-the-world
        // pause never waits on a thread that waits on us.
        self.inner
            .lock_py_attached(py)
            .map_err(|_| PyRuntimeError::new_err("Scheduler is unusable: an earlier call panicked"))
    }

    /// Call the waker, if one is set (outside the scheduler's lock). Its failure is not the
    /// caller's: it is reported as unraisable, and the call that woke it stands.
    fn wake(&self, py: Python<'_>) {
        let waker = match self.waker.lock_py_attached(py) {
            Ok(slot) => slot.as_ref().map(|w| w.clone_ref(py)),
            Err(_) => None,
        };
        if let Some(waker) = waker {
            if let Err(err) = waker.call0(py) {
                err.write_unraisable(py, Some(waker.bind(py)));
            }
        }
    }
}

#[pymethods]
impl PyScheduler {
    /// Every setting is optional: omitted or `None`, it takes its value from `Config::default`
    /// (published as `SCHEDULER_DEFAULTS`), except `seed`, which is then drawn at random.
    #[new]
    #[pyo3(signature = (
        *,
        concurrency = None,
        debounce = None,
        debounce_max = None,
        max_wait = None,
        backoff_base = None,
        backoff_max = None,
        seed = None,
        group_weights = None,
        group_concurrency = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        concurrency: Option<i64>,
        debounce: Option<f64>,
        debounce_max: Option<f64>,
        max_wait: Option<f64>,
        backoff_base: Option<f64>,
        backoff_max: Option<f64>,
        seed: Option<&Bound<'_, PyAny>>,
        group_weights: Option<&Bound<'_, PyMapping>>,
        group_concurrency: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let seed = match seed {
            None => RandomState::new().hash_one(clock::monotonic().unwrap_or(0.0).to_bits()),
            Some(obj) => obj.extract::<u64>().map_err(|_| {
                PyValueError::new_err(format!(
                    "seed must be an int in [0, 2**64) or None, got {}",
                    obj.repr()
                        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
                ))
            })?,
        };
        let default = Config::default();
        let concurrency = match concurrency {
            Some(n) => non_negative_int("concurrency", n)?,
            None => default.concurrency,
        };
        let config = Config {
            concurrency,
            debounce: debounce.unwrap_or(default.debounce),
            debounce_max: debounce_max.or(default.debounce_max),
            max_wait: max_wait.unwrap_or(default.max_wait),
            backoff_base: backoff_base.unwrap_or(default.backoff_base),
            backoff_max: backoff_max.unwrap_or(default.backoff_max),
            seed,
            group_concurrency: match group_concurrency {
                Some(obj) if !obj.is_none() => group_cap(obj)?,
                _ => default.group_concurrency,
            },
        };
        let mut inner = Scheduler::new(config).map_err(|e| to_py_err(e, None))?;
        let weights = match group_weights {
            Some(m) => m.items()?.iter().collect(),
            None => Vec::new(),
        };
        for item in weights {
            let (group, weight): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let name = key_str(&group, "group_weights key")?;
            let weight = weight.extract::<i64>().map_err(|_| {
                PyValueError::new_err(format!(
                    "weight of group {name:?} must be an int, not {}",
                    type_name(&weight)
                ))
            })?;
            inner
                .set_group_weight(name, weight_u32(name, weight)?)
                .map_err(|e| to_py_err(e, None))?;
        }
        Ok(Self {
            inner: Mutex::new(inner),
            waker: Mutex::new(None),
        })
    }

    /// Queue `key` (ready `after` seconds from now), or merge into its existing record.
    #[pyo3(signature = (key, *, after = 0.0, priority = 0, group = None, now = None))]
    fn add(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        after: f64,
        priority: i64,
        group: Option<&Bound<'_, PyAny>>,
        now: Option<f64>,
    ) -> PyResult<()> {
        let k = key_str(key, "key")?;
        let group = group_str(group)?;
        let now = resolve_now(py, now)?;
        let result = self.lock(py)?.add_in(group, k, after, priority, now);
        result.map_err(|e| to_py_err(e, Some(key)))
    }

    /// `add` for each key of an iterable of str, with one `now`; all or nothing on bad input.
    #[pyo3(signature = (keys, *, after = 0.0, priority = 0, group = None, now = None))]
    fn add_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        after: f64,
        priority: i64,
        group: Option<&Bound<'_, PyAny>>,
        now: Option<f64>,
    ) -> PyResult<()> {
        let group = group_str(group)?;
        let items = key_items(keys, "add_many")?;
        let strs = key_strs(&items, "add_many")?;
        let now = resolve_now(py, now)?;
        let result = self
            .lock(py)?
            .add_many_in(group, strs.iter().copied(), after, priority, now);
        result.map_err(|e| to_py_err(e, None))
    }

    /// Hand out the next ready key (now in flight), or None.
    #[pyo3(signature = (*, now = None))]
    fn pop<'py>(
        &self,
        py: Python<'py>,
        now: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyString>>> {
        let now = resolve_now(py, now)?;
        let key: Option<String> = {
            let mut inner = self.lock(py)?;
            inner
                .pop(now)
                .map_err(|e| to_py_err(e, None))?
                .map(str::to_owned)
        };
        Ok(key.map(|k| PyString::new(py, &k)))
    }

    /// Up to `max` `pop`s with one `now`, as a list.
    #[pyo3(signature = (max, *, now = None))]
    fn pop_many<'py>(
        &self,
        py: Python<'py>,
        max: i64,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let max = usize::try_from(max)
            .map_err(|_| PyValueError::new_err(format!("max must be >= 0, got {max}")))?;
        let now = resolve_now(py, now)?;
        // Copy the keys into one buffer under the lock; make Python strings after it.
        let mut text = String::new();
        let mut ends = Vec::new();
        {
            let mut inner = self.lock(py)?;
            inner
                .pop_many(max, now, |k| {
                    text.push_str(k);
                    ends.push(text.len());
                })
                .map_err(|e| to_py_err(e, None))?;
        }
        let mut start = 0;
        let keys = ends.iter().map(|&end| {
            let k = &text[start..end];
            start = end;
            k
        });
        PyList::new(py, keys)
    }

    /// End the in-flight state of `key`; requeue it as asked, or after a backoff if failed.
    #[pyo3(signature = (key, *, requeue_after = None, failed = false, priority = None, now = None))]
    fn done(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        requeue_after: Option<f64>,
        failed: bool,
        priority: Option<i64>,
        now: Option<f64>,
    ) -> PyResult<()> {
        let k = key_str(key, "key")?;
        let now = resolve_now(py, now)?;
        let result = self.lock(py)?.done(k, requeue_after, failed, priority, now);
        result.map_err(|e| to_py_err(e, Some(key)))
    }

    /// Serve fair group `group` up to `weight` keys per turn (default 1).
    fn set_group_weight(
        &self,
        py: Python<'_>,
        group: &Bound<'_, PyAny>,
        weight: i64,
    ) -> PyResult<()> {
        let name = key_str(group, "group")?;
        let weight = weight_u32(name, weight)?;
        let result = self.lock(py)?.set_group_weight(name, weight);
        result.map_err(|e| to_py_err(e, None))
    }

    /// Give fair group `group` its own cap on keys in flight (0: none; None: the default
    /// `group_concurrency` again).
    fn set_group_concurrency(
        &self,
        py: Python<'_>,
        group: &Bound<'_, PyAny>,
        cap: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let name = key_str(group, "group")?;
        let cap = if cap.is_none() {
            None
        } else {
            Some(group_cap(cap)?)
        };
        let result = self.lock(py)?.set_group_concurrency(name, cap);
        result.map_err(|e| to_py_err(e, None))?;
        self.wake(py);
        Ok(())
    }

    /// Call `waker()` after each `set_group_concurrency` (None: no more). The applier sets
    /// one while it runs on this scheduler: a raised cap releases held keys, and nothing
    /// else would wake it to start them. The waker must not refer to the scheduler (the
    /// reference is not visible to the garbage collector).
    #[pyo3(signature = (waker, /))]
    fn _set_waker(&self, py: Python<'_>, waker: Option<Py<PyAny>>) -> PyResult<()> {
        if let Some(w) = &waker {
            if !w.bind(py).is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "waker must be callable or None, not {}",
                    type_name(w.bind(py))
                )));
            }
        }
        let previous = {
            let mut slot = self.waker.lock_py_attached(py).map_err(|_| {
                PyRuntimeError::new_err("Scheduler is unusable: an earlier call panicked")
            })?;
            std::mem::replace(&mut *slot, waker)
        };
        drop(previous); // outside the lock: dropping a Python object may run Python code
        Ok(())
    }

    /// The cap on keys in flight of fair group `group` (its own, else the default; 0: none).
    fn group_concurrency_of(&self, py: Python<'_>, group: &Bound<'_, PyAny>) -> PyResult<u32> {
        let name = key_str(group, "group")?;
        Ok(self.lock(py)?.group_concurrency_of(name))
    }

    /// The weight of fair group `group` (1 unless set).
    fn group_weight(&self, py: Python<'_>, group: &Bound<'_, PyAny>) -> PyResult<u32> {
        let name = key_str(group, "group")?;
        Ok(self.lock(py)?.group_weight(name))
    }

    /// The fair group of `key`, or None (absent, or added without a group).
    fn group_of(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let k = key_str(key, "key")?;
        Ok(self.lock(py)?.group_of(k).map(str::to_owned))
    }

    /// `done` of each key of an iterable of str, with one `now`: the batched end of
    /// successful reconciles. A non-`str` key refuses the whole batch; a key not in flight
    /// raises `KeyError` after the keys before it are done.
    #[pyo3(signature = (keys, *, now = None))]
    fn done_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, now: Option<f64>) -> PyResult<()> {
        let items = key_items(keys, "done_many")?;
        let strs = key_strs(&items, "done_many")?;
        let now = resolve_now(py, now)?;
        let result = self.lock(py)?.done_many(strs.iter().copied(), now);
        result.map_err(|e| match e {
            Error::NotInFlight(ref k) => {
                // Only on this error: find the Python key, to show it as Python would.
                let key = items
                    .iter()
                    .find(|obj| key_str(obj, "").is_ok_and(|s| s == k));
                not_in_flight("done_many", k, key)
            }
            other => to_py_err(other, None),
        })
    }

    /// Reset the failure count of `key`.
    fn forget(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = key_str(key, "key")?;
        self.lock(py)?.forget(k);
        Ok(())
    }

    /// The consecutive-failure count of `key` (0 if it has none or is absent).
    fn failures(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<u32> {
        let k = key_str(key, "key")?;
        Ok(self.lock(py)?.failures(k))
    }

    /// When the next queued key is (or was) ready; see docs/scheduler.md.
    fn next_ready_at(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        Ok(self.lock(py)?.next_ready_at())
    }

    /// Keys in flight (dirty ones included).
    #[getter]
    fn in_flight(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.in_flight())
    }

    fn is_in_flight(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = key_str(key, "key")?;
        Ok(self.lock(py)?.is_in_flight(k))
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = key_str(key, "key")?;
        Ok(self.lock(py)?.contains(k))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.len())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let (len, in_flight, concurrency) = {
            let inner = self.lock(py)?;
            (inner.len(), inner.in_flight(), inner.config().concurrency)
        };
        Ok(format!(
            "<Scheduler len={len} in_flight={in_flight} concurrency={concurrency}>"
        ))
    }

    /// Counts, ages (measured at `now`) and histograms, for metrics.
    #[pyo3(signature = (*, now = None))]
    fn stats<'py>(&self, py: Python<'py>, now: Option<f64>) -> PyResult<Bound<'py, PyDict>> {
        let now = resolve_query_now(py, now)?;
        let s = {
            let mut inner = self.lock(py)?;
            inner.stats(now).map_err(|e| to_py_err(e, None))?
        };
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

    /// The state of `key` as of `now` (due keys promoted first), or None if it has no record.
    #[pyo3(signature = (key, *, now = None))]
    fn inspect<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let k = key_str(key, "key")?;
        let now = resolve_query_now(py, now)?;
        let found = self.lock(py)?.inspect(k, now);
        match found.map_err(|e| to_py_err(e, Some(key)))? {
            Some(i) => Ok(Some(inspection(py, &i)?)),
            None => Ok(None),
        }
    }

    /// Counts by state and priority, the oldest ready key and the next waiting time.
    #[pyo3(signature = (*, now = None))]
    fn queue_summary<'py>(
        &self,
        py: Python<'py>,
        now: Option<f64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let now = resolve_query_now(py, now)?;
        let q = self.lock(py)?.queue_summary(now);
        summary(py, &q.map_err(|e| to_py_err(e, None))?)
    }

    /// Check the internal invariants (O(n)); raises AssertionError naming the broken one.
    fn _check_consistency(&self, py: Python<'_>) -> PyResult<()> {
        let result = self.lock(py)?.check_consistency();
        result.map_err(pyo3::exceptions::PyAssertionError::new_err)
    }

    #[getter]
    fn concurrency(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.config().concurrency)
    }

    #[getter]
    fn group_concurrency(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.lock(py)?.config().group_concurrency)
    }

    #[getter]
    fn debounce(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.config().debounce)
    }

    #[getter]
    fn debounce_max(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.config().debounce_max.unwrap_or(0.0))
    }

    #[getter]
    fn max_wait(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.config().max_wait)
    }

    #[getter]
    fn backoff_base(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.config().backoff_base)
    }

    #[getter]
    fn backoff_max(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.lock(py)?.config().backoff_max)
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyScheduler>()?;
    crate::cache_binding::register(m)?;
    crate::otlp_binding::register(m)?;
    crate::otlp_span::register(m)?;
    crate::otlp_http::register(m)?;
    crate::written_binding::register(m)?;
    crate::stream_binding::register(m)?;
    crate::tls_binding::register(m)?;
    m.add("MAX_DELAY", MAX_DELAY)?;
    m.add("SCHEDULER_DEFAULTS", scheduler_defaults(m.py())?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
