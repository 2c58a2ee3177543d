//! The Scheduler binding's arguments: keys and groups as `&str` (a `TypeError` naming what
//! was passed instead), weights, caps and seeds checked, the clock read when `now` is not
//! given, and the core's errors as the Python exceptions users expect.

use std::hash::{BuildHasher, RandomState};

use pyo3::exceptions::{PyKeyError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyMapping, PyString};

use crate::clock;
use crate::scheduler::{Error, Scheduler, MAX_GROUP_CONCURRENCY, MAX_WEIGHT};

/// The key as `&str`, or a `TypeError` naming what was passed instead.
pub(super) fn key_str<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<&'a str> {
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
pub(super) fn group_str<'a>(obj: Option<&'a Bound<'_, PyAny>>) -> PyResult<Option<&'a str>> {
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
pub(super) fn weight_u32(group: &str, weight: i64) -> PyResult<u32> {
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
pub(super) fn key_items<'py>(
    keys: &Bound<'py, PyAny>,
    call: &str,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
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
pub(super) fn key_strs<'a>(items: &'a [Bound<'_, PyAny>], call: &str) -> PyResult<Vec<&'a str>> {
    let mut strs = Vec::with_capacity(items.len());
    for (i, obj) in items.iter().enumerate() {
        match obj.cast::<PyString>() {
            Ok(s) => strs.push(s.to_str()?),
            Err(_) => return Err(key_str(obj, &format!("{call}() key at index {i}")).unwrap_err()),
        }
    }
    Ok(strs)
}

pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// `now`, or the monotonic clock (the one `time.monotonic()` reads).
pub(super) fn resolve_now(py: Python<'_>, now: Option<f64>) -> PyResult<f64> {
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
pub(super) fn resolve_query_now(py: Python<'_>, now: Option<f64>) -> PyResult<f64> {
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
pub(super) fn to_py_err(err: Error, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    match err {
        Error::InvalidDelay { .. } | Error::InvalidTime(_) | Error::InvalidConfig { .. } => {
            PyValueError::new_err(err.to_string())
        }
        Error::NotInFlight(k) => not_in_flight("done", &k, key),
        Error::TooManyKeys => PyMemoryError::new_err(err.to_string()),
    }
}

/// The `KeyError` of `call` for a key not in flight, showing the key as Python would.
pub(super) fn not_in_flight(call: &str, k: &str, key: Option<&Bound<'_, PyAny>>) -> PyErr {
    let shown = key
        .and_then(|k| k.repr().ok())
        .map_or_else(|| format!("{k:?}"), |r| r.to_string());
    PyKeyError::new_err(format!("{call}(): key {shown} is not in flight"))
}

/// `group_concurrency`: an int in [0, MAX_GROUP_CONCURRENCY] (not a bool: `True` would read
/// as a cap of 1), else a `ValueError` naming the parameter.
pub(super) fn group_cap(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
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

pub(super) fn non_negative_int(name: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value)
        .map_err(|_| PyValueError::new_err(format!("{name} must be an int >= 0, got {value}")))
}

/// `seed`: an int in [0, 2**64), or drawn at random when `None`.
pub(super) fn seed_of(seed: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
    match seed {
        None => Ok(RandomState::new().hash_one(clock::monotonic().unwrap_or(0.0).to_bits())),
        Some(obj) => obj.extract::<u64>().map_err(|_| {
            PyValueError::new_err(format!(
                "seed must be an int in [0, 2**64) or None, got {}",
                obj.repr()
                    .map_or_else(|_| "?".to_owned(), |r| r.to_string())
            ))
        }),
    }
}

/// Each `(group, weight)` of `group_weights`, checked, set on `inner`.
pub(super) fn set_group_weights(
    inner: &mut Scheduler,
    group_weights: Option<&Bound<'_, PyMapping>>,
) -> PyResult<()> {
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
    Ok(())
}

/// The error of a call on a scheduler whose lock an earlier call poisoned by panicking.
pub(super) fn poisoned() -> PyErr {
    PyRuntimeError::new_err("Scheduler is unusable: an earlier call panicked")
}
