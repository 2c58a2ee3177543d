//! The Python binding of `frames` and `proto`: `fastctl._core.decode_frame`,
//! `decode_lines`, `decode_proto_frames`, `decode_proto_object`, `decode_list`,
//! `decode_object` and `Item` (one decoded object, which `CompactMap` keeps).
//!
//! Thin: arguments in, results out, a decoding error as `ValueError` with the decoder's
//! message (the watcher raises it as `WatchStreamError`). Keys cross as (name, namespace),
//! the namespace `None` for a cluster-scoped object.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::cache::Packed;
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

pub(crate) fn none_if_empty(s: &str) -> Option<&str> {
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyItem>()?;
    m.add_function(wrap_pyfunction!(decode_frame, m)?)?;
    m.add_function(wrap_pyfunction!(decode_lines, m)?)?;
    m.add_function(wrap_pyfunction!(decode_proto_frames, m)?)?;
    m.add_function(wrap_pyfunction!(decode_proto_object, m)?)?;
    m.add_function(wrap_pyfunction!(decode_object, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    Ok(())
}
