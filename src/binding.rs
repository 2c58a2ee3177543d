//! The Python binding: `fastctl._core.Scheduler`, a thin wrapper over
//! `crate::scheduler::Scheduler`.
//!
//! Its only jobs are converting arguments (refusing non-`str` keys with a `TypeError` that
//! names the type), reading the clock when `now` is not given, locking, and mapping errors to
//! Python exceptions. Everything that touches Python (argument extraction, reading
//! `time.monotonic`, building results, formatting errors) happens before the lock is taken or
//! after it is released, so a finalizer or another thread can never deadlock on it.
//!
//! Its parts: the arguments (`args`) and the answers as dicts (`dicts`).

mod args;
mod dicts;

use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyDict, PyList, PyMapping, PyString};

use crate::scheduler::{Config, Error, Scheduler};
use args::{
    group_cap, group_str, key_items, key_str, key_strs, non_negative_int, not_in_flight, poisoned,
    resolve_now, resolve_query_now, seed_of, set_group_weights, to_py_err, type_name, weight_u32,
};
pub(crate) use dicts::scheduler_defaults;

/// A keyed priority/delay scheduler: one record per key, never two hand-outs of a key at once.
///
/// See docs/scheduler.md for the full semantics.
#[pyclass(frozen, name = "Scheduler", module = "fastctl._core")]
pub(crate) struct PyScheduler {
    inner: Mutex<Scheduler>,
    /// Called with no arguments after `set_group_concurrency`, which may release a held
    /// group: the applier running on this scheduler sleeps until something wakes it, and
    /// it knows of its own calls only (`_set_waker`).
    waker: Mutex<Option<Py<PyAny>>>,
}

impl PyScheduler {
    fn lock(&self, py: Python<'_>) -> PyResult<MutexGuard<'_, Scheduler>> {
        // Detaches from the interpreter while waiting, so a free-threaded stop-the-world
        // pause never waits on a thread that waits on us.
        self.inner.lock_py_attached(py).map_err(|_| poisoned())
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
        let seed = seed_of(seed)?;
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
        set_group_weights(&mut inner, group_weights)?;
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
            let mut slot = self.waker.lock_py_attached(py).map_err(|_| poisoned())?;
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
        dicts::stats(py, &s)
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
            Some(i) => Ok(Some(dicts::inspection(py, &i)?)),
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
        dicts::summary(py, &q.map_err(|e| to_py_err(e, None))?)
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
