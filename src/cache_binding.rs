//! The Python binding of `cache`: `fastctl._core.CompactMap`, the cache's table, which
//! keeps the `Item`s the frame decoders make (`frames_binding`).
//!
//! Thin: arguments in, results out. Keys cross as (name, namespace), the namespace `None`
//! for a cluster-scoped object.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::cache::{CompactMap, Packed};
use crate::frames;
use crate::frames_binding::{none_if_empty, PyItem};

/// The cache's table: objects as JSON bytes by (name, namespace), indexed by controller
/// owner uid (see `crate::cache`).
#[pyclass(name = "CompactMap", module = "fastctl._core")]
#[derive(Default)]
pub struct PyCompactMap {
    map: CompactMap,
}

fn ns_of(namespace: Option<&str>) -> &str {
    namespace.unwrap_or("")
}

fn key_tuple<'py>(py: Python<'py>, p: &Packed) -> PyResult<Bound<'py, PyTuple>> {
    (p.name(), none_if_empty(p.namespace())).into_pyobject(py)
}

/// Reads copy what they return out of the map (one `Arc` per object) under a borrow that
/// ends before any Python container is made. Making a list, tuple or dict can run the
/// garbage collector and a finalizer's Python code with it, and that code can hand the GIL
/// to another thread: a borrow still held then would make the loop thread's `put` fail
/// with "Already borrowed" while a plain-function reconcile reads the cache on its thread.
/// Bytes and strings are not collected objects, so `get`, `remove` and `label` convert
/// under the borrow.
impl PyCompactMap {
    fn picked(slf: &Bound<'_, Self>, pick: impl Fn(&Packed) -> bool) -> Vec<Packed> {
        slf.borrow()
            .map
            .iter()
            .filter(|p| pick(p))
            .cloned()
            .collect()
    }

    pub(crate) fn one(
        slf: &Bound<'_, Self>,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<Packed> {
        slf.borrow().map.get(ns_of(namespace), name).cloned()
    }
}

#[pymethods]
impl PyCompactMap {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    fn __len__(&self) -> usize {
        self.map.len()
    }

    /// Put `item` in (replacing the object of its key).
    fn put(&mut self, item: &Bound<'_, PyItem>) {
        self.map.insert(item.get().packed.clone());
    }

    /// Put `item` in, or, when `held` has the same version of it, the copy `held` keeps
    /// (a relist then holds only the changed objects twice).
    fn put_listed(&mut self, item: &Bound<'_, PyItem>, held: &Bound<'_, PyCompactMap>) {
        let packed = &item.get().packed;
        let held = held.borrow();
        let kept = match held.map.get(packed.namespace(), packed.name()) {
            Some(old) if old.same_version(packed) => old.clone(),
            _ => packed.clone(),
        };
        self.map.insert(kept);
    }

    /// The JSON of the object, or None.
    #[pyo3(signature = (name, namespace=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<Bound<'py, PyBytes>> {
        self.map
            .get(ns_of(namespace), name)
            .map(|p| PyBytes::new(py, p.json()))
    }

    #[pyo3(signature = (name, namespace=None))]
    fn contains(&self, name: &str, namespace: Option<&str>) -> bool {
        self.map.get(ns_of(namespace), name).is_some()
    }

    /// ``(uid, resourceVersion)`` of the object (each None when it has none), or None.
    #[pyo3(signature = (name, namespace=None))]
    fn version<'py>(
        slf: &Bound<'py, Self>,
        name: &str,
        namespace: Option<&str>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        Self::one(slf, name, namespace)
            .map(|p| {
                (none_if_empty(p.uid()), none_if_empty(p.resource_version()))
                    .into_pyobject(slf.py())
            })
            .transpose()
    }

    /// Take the object out: its JSON, or None.
    #[pyo3(signature = (name, namespace=None))]
    fn remove<'py>(
        &mut self,
        py: Python<'py>,
        name: &str,
        namespace: Option<&str>,
    ) -> Option<Bound<'py, PyBytes>> {
        self.map
            .remove(ns_of(namespace), name)
            .map(|p| PyBytes::new(py, p.json()))
    }

    /// Every key, as ``(name, namespace)``; of one `namespace` when given.
    #[pyo3(signature = (namespace=None))]
    fn keys<'py>(slf: &Bound<'py, Self>, namespace: Option<&str>) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        let list = PyList::empty(py);
        for p in Self::picked(slf, |p| namespace.is_none_or(|ns| ns == p.namespace())) {
            list.append(key_tuple(py, &p)?)?;
        }
        Ok(list)
    }

    /// The JSON of every object; of one `namespace` when given.
    #[pyo3(signature = (namespace=None))]
    fn values<'py>(
        slf: &Bound<'py, Self>,
        namespace: Option<&str>,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        let list = PyList::empty(py);
        for p in Self::picked(slf, |p| namespace.is_none_or(|ns| ns == p.namespace())) {
            list.append(PyBytes::new(py, p.json()))?;
        }
        Ok(list)
    }

    /// The JSON of the objects whose controller owner has this uid.
    fn owned_by<'py>(slf: &Bound<'py, Self>, uid: &str) -> PyResult<Bound<'py, PyList>> {
        let owned: Vec<Packed> = slf.borrow().map.owned_by(uid).cloned().collect();
        let list = PyList::empty(slf.py());
        for p in owned {
            list.append(PyBytes::new(slf.py(), p.json()))?;
        }
        Ok(list)
    }

    /// The objects here (of `namespace` when given) that `other` lacks: ``(name,
    /// namespace, json)`` each.
    #[pyo3(signature = (other, namespace=None))]
    fn missing_from<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyCompactMap>,
        namespace: Option<&str>,
    ) -> PyResult<Bound<'py, PyList>> {
        let missing = {
            let other = other.borrow();
            Self::picked(slf, |p| {
                namespace.is_none_or(|ns| ns == p.namespace())
                    && other.map.get(p.namespace(), p.name()).is_none()
            })
        };
        let py = slf.py();
        let list = PyList::empty(py);
        for p in missing {
            let (name, ns) = (p.name(), none_if_empty(p.namespace()));
            list.append((name, ns, PyBytes::new(py, p.json())))?;
        }
        Ok(list)
    }

    /// Put every object of `other` that is not already the one held; how many were put.
    /// (Nothing of Python is made while the map is borrowed mutably.)
    fn merge(&mut self, other: &Bound<'_, PyCompactMap>) -> usize {
        let other = other.borrow();
        let mut put = 0;
        for p in other.map.iter() {
            let same = self
                .map
                .get(p.namespace(), p.name())
                .is_some_and(|held| held.ptr_eq(p));
            if !same {
                self.map.insert(p.clone());
                put += 1;
            }
        }
        put
    }

    /// Whether this map and `other` hold the very same bytes for the object (a relist
    /// kept the held copy).
    #[pyo3(signature = (other, name, namespace=None))]
    fn holds_same(
        &self,
        other: &Bound<'_, PyCompactMap>,
        name: &str,
        namespace: Option<&str>,
    ) -> bool {
        let other = other.borrow();
        let ns = ns_of(namespace);
        match (self.map.get(ns, name), other.map.get(ns, name)) {
            (Some(a), Some(b)) => a.ptr_eq(b),
            _ => false,
        }
    }

    /// The value of label `key` of the object, or None.
    #[pyo3(signature = (key, name, namespace=None))]
    fn label(&self, key: &str, name: &str, namespace: Option<&str>) -> Option<String> {
        self.map
            .get(ns_of(namespace), name)
            .and_then(|p| frames::label_of(p.json(), key))
    }

    /// ``(name, namespace, value)`` of every object labelled `key`.
    fn label_values<'py>(slf: &Bound<'py, Self>, key: &str) -> PyResult<Bound<'py, PyList>> {
        let labelled: Vec<(Packed, String)> = slf
            .borrow()
            .map
            .iter()
            .filter_map(|p| frames::label_of(p.json(), key).map(|value| (p.clone(), value)))
            .collect();
        let list = PyList::empty(slf.py());
        for (p, value) in labelled {
            list.append((p.name(), none_if_empty(p.namespace()), value))?;
        }
        Ok(list)
    }

    /// The labels of the object, as a new dict (empty when it is absent).
    #[pyo3(signature = (name, namespace=None))]
    fn labels<'py>(
        slf: &Bound<'py, Self>,
        name: &str,
        namespace: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(slf.py());
        if let Some(p) = Self::one(slf, name, namespace) {
            for (k, v) in frames::labels_of(p.json()) {
                dict.set_item(k, v)?;
            }
        }
        Ok(dict)
    }

    /// The heap the objects and tables hold, in bytes (an estimate, for benchmarks).
    fn heap_bytes(&self) -> usize {
        self.map.table_bytes() + self.map.iter().map(Packed::heap_bytes).sum::<usize>()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompactMap>()?;
    Ok(())
}
