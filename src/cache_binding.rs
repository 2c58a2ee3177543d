//! The Python binding of `frames`, `proto` and `cache`: `fastctl._core.decode_frame`,
//! `decode_lines`, `decode_proto_frames`, `decode_list`, `decode_object`, `Item` (one
//! decoded object) and `CompactMap` (the cache's table).
//!
//! Thin: arguments in, results out, a decoding error as `ValueError` with the decoder's
//! message (the watcher raises it as `WatchStreamError`). Keys cross as (name, namespace),
//! the namespace `None` for a cluster-scoped object.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::cache::{CompactMap, Packed};
use crate::frames::{self, Frame, Object, Options, Owner};
use crate::proto;

/// One decoded object: its JSON as kept and the metadata fastctl reads.
#[pyclass(frozen, name = "Item", module = "fastctl._core")]
pub struct PyItem {
    pub(crate) packed: Packed,
    generation: Option<i64>,
    deletion_timestamp: Option<String>,
    labels: Vec<(String, String)>,
    owners: Vec<Owner>,
    api_version: Option<String>,
    kind: Option<String>,
    initial_events_end: bool,
}

impl PyItem {
    fn of(object: Object) -> Self {
        let packed = Packed::of(&object);
        let meta = object.meta;
        PyItem {
            packed,
            generation: meta.generation,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels,
            owners: meta.owners,
            api_version: object.api_version,
            kind: object.kind,
            initial_events_end: meta.initial_events_end,
        }
    }
}

fn none_if_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[pymethods]
impl PyItem {
    /// The object's JSON as kept (managedFields cut when asked; identity filled in).
    #[getter]
    fn json<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.packed.json())
    }
    #[getter]
    fn name(&self) -> &str {
        self.packed.name()
    }
    #[getter]
    fn namespace(&self) -> Option<&str> {
        none_if_empty(self.packed.namespace())
    }
    #[getter]
    fn uid(&self) -> Option<&str> {
        none_if_empty(self.packed.uid())
    }
    #[getter]
    fn resource_version(&self) -> Option<&str> {
        none_if_empty(self.packed.resource_version())
    }
    /// The controller owner reference's uid, if any.
    #[getter]
    fn controller_uid(&self) -> Option<&str> {
        none_if_empty(self.packed.owner())
    }
    #[getter]
    fn generation(&self) -> Option<i64> {
        self.generation
    }
    #[getter]
    fn deletion_timestamp(&self) -> Option<&str> {
        self.deletion_timestamp.as_deref()
    }
    /// The object's own `apiVersion` as received (before any identity was given).
    #[getter]
    fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }
    /// The object's own `kind` as received.
    #[getter]
    fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }
    /// The annotation `k8s.io/initial-events-end` is `"true"` (a streaming list's end).
    #[getter]
    fn initial_events_end(&self) -> bool {
        self.initial_events_end
    }
    /// The labels, as a new dict.
    fn labels<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (k, v) in &self.labels {
            dict.set_item(k, v)?;
        }
        Ok(dict)
    }
    /// The owner references: (apiVersion, kind, name, uid, controller) each.
    fn owners<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for o in &self.owners {
            list.append((&o.api_version, &o.kind, &o.name, &o.uid, o.controller))?;
        }
        Ok(list)
    }
    fn __repr__(&self) -> String {
        let ns = self.packed.namespace();
        let sep = if ns.is_empty() { "" } else { "/" };
        format!(
            "<Item {ns}{sep}{} rv={}>",
            self.packed.name(),
            self.packed.resource_version()
        )
    }
}

fn options<'a>(
    strip_managed_fields: bool,
    api_version: Option<&'a str>,
    kind: Option<&'a str>,
    replace_identity: bool,
) -> Options<'a> {
    Options {
        strip_managed_fields,
        identity: api_version.zip(kind),
        replace_identity,
        lenient: false,
    }
}

fn value_error(e: frames::Error) -> PyErr {
    PyValueError::new_err(e.0)
}

/// One watch line: ``(type, Item)``, or ``("ERROR", status_json_bytes)``.
#[pyfunction]
#[pyo3(signature = (line, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false))]
fn decode_frame<'py>(
    py: Python<'py>,
    line: &[u8],
    strip_managed_fields: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
    replace_identity: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = options(strip_managed_fields, api_version, kind, replace_identity);
    frame_tuple(py, frames::decode_frame(line, opts).map_err(value_error)?)
}

pub(crate) fn frame_tuple<'py>(py: Python<'py>, frame: Frame) -> PyResult<Bound<'py, PyTuple>> {
    match frame {
        Frame::Error(status) => ("ERROR", PyBytes::new(py, &status)).into_pyobject(py),
        Frame::Object(etype, object) => {
            (etype, Bound::new(py, PyItem::of(*object))?).into_pyobject(py)
        }
    }
}

/// Every complete line of a watch stream's `buffer`: ``(frames, used, error, line)``, the
/// frames as `decode_frame` gives them (blank lines skipped), how many bytes the lines took
/// (the rest waits for more), and for a malformed line, the decoder's message and the line
/// (the frames before it are kept; none after it is read); a line over `max_line` bytes is
/// one. Decoded without holding the GIL.
#[pyfunction]
#[pyo3(signature = (buffer, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false, max_line=usize::MAX))]
fn decode_lines<'py>(
    py: Python<'py>,
    buffer: &[u8],
    strip_managed_fields: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
    replace_identity: bool,
    max_line: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = options(strip_managed_fields, api_version, kind, replace_identity);
    let lines = py.detach(|| frames::decode_lines(buffer, opts, max_line));
    lines_tuple(py, lines)
}

/// Every complete frame of a protobuf watch stream's `buffer` (ConfigMaps and Secrets,
/// `proto`), as `decode_lines` gives a JSON stream's lines: ``(frames, used, error,
/// frame)``, each frame's object the JSON the API server would have sent for it; a frame
/// over `max_frame` bytes is an error. Decoded without holding the GIL.
#[pyfunction]
#[pyo3(signature = (buffer, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false, max_frame=usize::MAX))]
fn decode_proto_frames<'py>(
    py: Python<'py>,
    buffer: &[u8],
    strip_managed_fields: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
    replace_identity: bool,
    max_frame: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = options(strip_managed_fields, api_version, kind, replace_identity);
    let lines = py.detach(|| proto::decode_frames(buffer, opts, max_frame));
    lines_tuple(py, lines)
}

/// One protobuf-encoded object (an error response's Status) as the API server's JSON of it.
#[pyfunction]
fn decode_proto_object<'py>(py: Python<'py>, encoded: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let json = proto::object_json(encoded).map_err(value_error)?;
    Ok(PyBytes::new(py, &json))
}

fn lines_tuple<'py>(py: Python<'py>, lines: frames::Lines) -> PyResult<Bound<'py, PyTuple>> {
    let list = PyList::empty(py);
    for frame in lines.frames {
        list.append(frame_tuple(py, frame)?)?;
    }
    let (message, line) = match lines.error {
        Some((frames::Error(message), line)) => (Some(message), Some(PyBytes::new(py, &line))),
        None => (None, None),
    };
    (list, lines.used, message, line).into_pyobject(py)
}

/// One object's JSON: an `Item` (a transform's result, a dict put in a store). `lenient`:
/// made in Python, not received (only `metadata.name` must be right).
#[pyfunction]
#[pyo3(signature = (json, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false, lenient=false))]
fn decode_object(
    json: &[u8],
    strip_managed_fields: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
    replace_identity: bool,
    lenient: bool,
) -> PyResult<PyItem> {
    let mut opts = options(strip_managed_fields, api_version, kind, replace_identity);
    opts.lenient = lenient;
    frames::decode_object(json, opts)
        .map(PyItem::of)
        .map_err(value_error)
}

/// A list response: ``(items, kind, continue, resourceVersion, shard_info)``.
#[pyfunction]
#[pyo3(signature = (page, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false))]
fn decode_list<'py>(
    py: Python<'py>,
    page: &[u8],
    strip_managed_fields: bool,
    api_version: Option<&str>,
    kind: Option<&str>,
    replace_identity: bool,
) -> PyResult<Bound<'py, PyTuple>> {
    let opts = options(strip_managed_fields, api_version, kind, replace_identity);
    let list = frames::decode_list(page, opts).map_err(value_error)?;
    let items = PyList::empty(py);
    for object in list.items {
        items.append(Bound::new(py, PyItem::of(object))?)?;
    }
    (
        items,
        list.kind,
        list.continue_token,
        list.resource_version,
        list.shard_info,
    )
        .into_pyobject(py)
}

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
    m.add_class::<PyItem>()?;
    m.add_class::<PyCompactMap>()?;
    m.add_function(wrap_pyfunction!(decode_frame, m)?)?;
    m.add_function(wrap_pyfunction!(decode_lines, m)?)?;
    m.add_function(wrap_pyfunction!(decode_proto_frames, m)?)?;
    m.add_function(wrap_pyfunction!(decode_proto_object, m)?)?;
    m.add_function(wrap_pyfunction!(decode_object, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    Ok(())
}
