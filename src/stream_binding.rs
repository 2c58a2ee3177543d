//! The Python binding of `stream`: `fastctl._core.WatchBody`, one watch response's body
//! decoded read by read (`fastctl.kube._watch_stream` feeds it from the socket).
//!
//! Thin, as `frames_binding`: a framing error is a `ValueError`; the frames are the tuples
//! `decode_lines` gives.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use crate::frames::{self, Options};
use crate::frames_binding::frame_tuple;
use crate::stream::{Framing, WatchBody};

/// A read at least this long is decoded without holding the GIL (a shorter one, the
/// common single event, costs less than giving the GIL up and taking it back).
const DETACH_FROM: usize = 64 * 1024;

/// One watch response's body: ``feed(data)`` takes each read off the socket as it is and
/// gives ``(frames, error, line)``, the frames its bytes completed (as `decode_lines`
/// gives them) and the first malformed or too long one, with what is wrong with it.
#[pyclass(name = "WatchBody", module = "fastctl._core")]
pub struct PyWatchBody {
    body: WatchBody,
    strip_managed_fields: bool,
    api_version: Option<String>,
    kind: Option<String>,
    replace_identity: bool,
}

#[pymethods]
impl PyWatchBody {
    /// `chunked`, else `length` bytes, else until the server closes; JSON lines, or
    /// `protobuf` frames; a frame over `max_line` bytes is an error.
    #[new]
    #[pyo3(signature = (chunked, length=None, protobuf=false, strip_managed_fields=false, api_version=None, kind=None, replace_identity=false, max_line=usize::MAX))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        chunked: bool,
        length: Option<usize>,
        protobuf: bool,
        strip_managed_fields: bool,
        api_version: Option<String>,
        kind: Option<String>,
        replace_identity: bool,
        max_line: usize,
    ) -> Self {
        let framing = match (chunked, length) {
            (true, _) => Framing::Chunked,
            (false, Some(length)) => Framing::Length(length),
            (false, None) => Framing::UntilClose,
        };
        PyWatchBody {
            body: WatchBody::new(framing, protobuf, max_line),
            strip_managed_fields,
            api_version,
            kind,
            replace_identity,
        }
    }

    /// One read's bytes: ``(frames, error, line)``; a framing error is a `ValueError`.
    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
        let PyWatchBody {
            body,
            strip_managed_fields,
            api_version,
            kind,
            replace_identity,
        } = self;
        let options = Options {
            strip_managed_fields: *strip_managed_fields,
            identity: api_version.as_deref().zip(kind.as_deref()),
            replace_identity: *replace_identity,
            lenient: false,
        };
        let fed = if data.len() >= DETACH_FROM {
            py.detach(|| body.feed(data, options))
        } else {
            body.feed(data, options)
        };
        let fed = fed.map_err(|frames::Error(message)| PyValueError::new_err(message))?;
        let list = PyList::empty(py);
        for frame in fed.lines.frames {
            list.append(frame_tuple(py, frame)?)?;
        }
        match fed.lines.error {
            Some((frames::Error(message), line)) => {
                (list, message, PyBytes::new(py, &line)).into_pyobject(py)
            }
            None => (list, py.None(), py.None()).into_pyobject(py),
        }
    }

    /// The body is complete (its last chunk, or its length, was read).
    #[getter]
    fn done(&self) -> bool {
        self.body.done
    }

    /// Bytes came after the body's end: the connection cannot be used again.
    #[getter]
    fn overrun(&self) -> bool {
        self.body.overrun
    }

    /// The bytes of a frame begun and not complete.
    #[getter]
    fn pending(&self) -> usize {
        self.body.pending()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWatchBody>()
}
