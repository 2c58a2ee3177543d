//! The Python binding of `written`: `fastctl._core.Written` (the read-your-writes guard's
//! state) and `Wrote` (one recorded write, opaque to Python).
//!
//! Thin: arguments in, results out. Kinds cross as the small integers the Python side gives
//! each cached kind; an event's effect as `seen` (0 applied, 1 deleted, 2 a list's item).
//! Nothing here calls back into Python: keys to wake and starts to count are returned.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::cache_binding::PyItem;
use crate::written::{Hold, Seen, Written, Wrote};

/// One write a reconcile made, as its fence waits for it.
#[pyclass(frozen, name = "Wrote", module = "fastctl._core")]
pub struct PyWrote(Wrote);

#[pymethods]
impl PyWrote {
    fn __repr__(&self) -> String {
        let w = &self.0;
        format!(
            "Wrote({:?}, uid={:?}, version={:?}, created={}, deleted={})",
            w.target.replace('\0', "/"),
            w.uid,
            w.version,
            w.created,
            w.deleted
        )
    }
}

fn seen_of(seen: u8) -> PyResult<Seen> {
    match seen {
        0 => Ok(Seen::Apply),
        1 => Ok(Seen::Delete),
        2 => Ok(Seen::Listed),
        _ => Err(PyValueError::new_err(format!(
            "seen must be 0, 1 or 2, got {seen}"
        ))),
    }
}

fn woken(keys: Vec<String>) -> Option<Vec<String>> {
    (!keys.is_empty()).then_some(keys)
}

/// The followed objects and fences of one controller run (see `crate::written`).
#[pyclass(name = "Written", module = "fastctl._core")]
pub struct PyWritten(Written);

#[pymethods]
impl PyWritten {
    #[new]
    fn new(max_wait: f64) -> PyResult<Self> {
        if !(max_wait.is_finite() && max_wait > 0.0) {
            return Err(PyValueError::new_err(format!(
                "max_wait must be a finite number of seconds > 0, got {max_wait}"
            )));
        }
        Ok(PyWritten(Written::new(max_wait)))
    }

    /// How many objects have a fence.
    fn __len__(&self) -> usize {
        self.0.fenced_count()
    }

    /// How many objects are followed.
    #[getter]
    fn followed(&self) -> usize {
        self.0.followed()
    }

    /// Whether held keys are woken (someone is bound to wake them).
    fn set_waking(&mut self, waking: bool) {
        self.0.set_waking(waking);
    }

    /// A write begins; True: its object was not followed (seed it with `seed`).
    fn follow(&mut self, kind: u32, namespace: &str, name: &str) -> bool {
        self.0.follow(kind, namespace, name)
    }

    fn seed(&mut self, kind: u32, namespace: &str, name: &str, uid: &str, version: &str) {
        self.0.seed(kind, namespace, name, uid, version);
    }

    /// A write ended: what its cache must show, or None.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (kind, namespace, name, target, uid, version, recorded, created, deleted))]
    fn answered(
        &mut self,
        kind: u32,
        namespace: &str,
        name: &str,
        target: &str,
        uid: &str,
        version: Option<&str>,
        recorded: bool,
        created: bool,
        deleted: bool,
    ) -> Option<PyWrote> {
        self.0
            .answered(
                kind, namespace, name, target, uid, version, recorded, created, deleted,
            )
            .map(PyWrote)
    }

    /// Whether the cache has applied `wrote`.
    fn shown(&self, wrote: &Bound<'_, PyWrote>) -> bool {
        self.0.shown(&wrote.get().0)
    }

    /// An event of one object that a cache of `kind` applied: the held keys to wake (None).
    fn saw(
        &mut self,
        kind: u32,
        namespace: &str,
        name: &str,
        uid: &str,
        version: &str,
        seen: u8,
    ) -> PyResult<Option<Vec<String>>> {
        let seen = seen_of(seen)?;
        Ok(woken(self.0.saw(kind, namespace, name, uid, version, seen)))
    }

    /// `saw` of a decoded object: its fields read here, no string made for Python.
    fn saw_item(
        &mut self,
        kind: u32,
        item: &Bound<'_, PyItem>,
        seen: u8,
    ) -> PyResult<Option<Vec<String>>> {
        let seen = seen_of(seen)?;
        let p = &item.get().packed;
        let keys = self.0.saw(
            kind,
            p.namespace(),
            p.name(),
            p.uid(),
            p.resource_version(),
            seen,
        );
        Ok(woken(keys))
    }

    /// A list frame of `kind`: its start or (`done`) its end; `namespace` for one
    /// namespace's list of a set. The held keys to wake, or None.
    #[pyo3(signature = (kind, done, namespace=None))]
    fn list_frame(
        &mut self,
        kind: u32,
        done: bool,
        namespace: Option<&str>,
    ) -> Option<Vec<String>> {
        woken(self.0.list_frame(kind, done, namespace))
    }

    /// The reconcile of `key` ended at `now` having made `writes`: its fence.
    fn fence(&mut self, key: &str, writes: &Bound<'_, PyTuple>, now: f64) -> PyResult<()> {
        let mut all = Vec::with_capacity(writes.len());
        for w in writes.iter() {
            all.push(w.cast::<PyWrote>()?.get().0.clone());
        }
        self.0.fence(key, all, now);
        Ok(())
    }

    /// The reconcile of `key` is about to start at `now`: None to start, the seconds to
    /// wait at most, or, for a start to count, ``(waited, was_held, expired, missing)``.
    fn hold<'py>(&mut self, py: Python<'py>, key: &str, now: f64) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self.0.hold(key, now) {
            Hold::Start(None) => py.None().into_bound(py),
            Hold::Wait(wait) => wait.into_pyobject(py)?.into_any(),
            Hold::Start(Some(s)) => (s.waited, s.was_held, s.expired, s.missing)
                .into_pyobject(py)?
                .into_any(),
        })
    }

    /// `key` will not start: forget its fence and hold.
    fn release(&mut self, key: &str) {
        self.0.release(key);
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWrote>()?;
    m.add_class::<PyWritten>()?;
    Ok(())
}
