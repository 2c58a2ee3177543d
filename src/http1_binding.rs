//! The Python binding of `http1`: `fastctl._core.Http1Reader`, the answers of one lean
//! transport connection (`fastctl.kube._http1.Connection`), read from the socket's bytes
//! (`feed`) or from the TLS session's (`feed_tls`: the plaintext stays in Rust).
//!
//! Thin: an answer is one tuple, ``(status, reason, lines, body, keep_alive, encoding,
//! chunked, length)`` (``lines``: the header lines as one bytes, CRLF between them;
//! ``chunked`` and ``length``, the body's framing, for a watch's stream), ``None`` while it
//! is not complete; a malformed answer is a `ValueError`, a TLS failure the `ssl` error
//! `TlsSession.feed` raises.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::frames;
use crate::http1::{Head, Phase, Read, Reader};
use crate::tls_binding::{self, PyTlsSession};
use crate::unframe::Framing;

/// A read at least this long is handled without holding the GIL.
const DETACH_FROM: usize = 64 * 1024;

/// One connection's answers: ``expect(no_body, stream)`` when a request is sent, then
/// ``feed(data)`` per read until it gives the answer; ``close()`` when the server closed.
#[pyclass(name = "Http1Reader", module = "fastctl._core")]
#[derive(Default)]
pub struct PyHttp1Reader {
    reader: Reader,
}

fn answer<'py>(py: Python<'py>, head: Head, body: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
    let reason: String = head.reason.iter().map(|&b| char::from(b)).collect(); // latin-1
    let (chunked, length) = match head.framing {
        Framing::Chunked => (true, None),
        Framing::Length(length) => (false, Some(length)),
        Framing::UntilClose => (false, None),
    };
    (
        head.status,
        reason,
        PyBytes::new(py, &head.lines),
        PyBytes::new(py, body),
        head.keep_alive,
        PyBytes::new(py, &head.encoding),
        chunked,
        length,
    )
        .into_pyobject(py)
}

fn read<'py>(py: Python<'py>, read: Read) -> PyResult<Option<Bound<'py, PyTuple>>> {
    match read {
        Read::More => Ok(None),
        Read::Answer(head, body) | Read::Stream(head, body) => answer(py, head, &body).map(Some),
    }
}

fn malformed(frames::Error(message): frames::Error) -> PyErr {
    PyValueError::new_err(message)
}

#[pymethods]
impl PyHttp1Reader {
    #[new]
    fn new() -> Self {
        PyHttp1Reader::default()
    }

    /// A request was sent: `no_body` for a ``HEAD``, `stream` when a 200 is a watch's.
    fn expect(&mut self, no_body: bool, stream: bool) {
        self.reader.expect(no_body, stream);
    }

    /// One read's bytes: the answer once complete, else ``None``.
    fn feed<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let reader = &mut self.reader;
        let fed = if data.len() >= DETACH_FROM {
            py.detach(|| reader.feed(data))
        } else {
            reader.feed(data)
        };
        read(py, fed.map_err(malformed)?)
    }

    /// One read of a TLS connection's socket, decrypted by `session` and read as `feed`
    /// reads: ``(answer or None, bytes to send or None)``.
    #[allow(clippy::type_complexity)]
    fn feed_tls<'py>(
        &mut self,
        py: Python<'py>,
        mut session: PyRefMut<'py, PyTlsSession>,
        data: &[u8],
    ) -> PyResult<(Option<Bound<'py, PyTuple>>, Option<Bound<'py, PyBytes>>)> {
        let session = &mut session.session;
        let reader = &mut self.reader;
        let mut work = || {
            let fed = session.feed(data).map_err(Err)?;
            let read = if fed.plain.is_empty() {
                Read::More
            } else {
                reader.feed(&fed.plain).map_err(Ok)?
            };
            Ok((read, fed.out))
        };
        let done: Result<_, Result<frames::Error, crate::tls::Error>> = if data.len() >= DETACH_FROM
        {
            py.detach(work)
        } else {
            work()
        };
        let (fed, out) = done.map_err(|error| match error {
            Ok(framing) => malformed(framing),
            Err(tls) => tls_binding::error(py, tls),
        })?;
        let out = (!out.is_empty()).then(|| PyBytes::new(py, &out));
        Ok((read(py, fed)?, out))
    }

    /// The server closed the connection: the answer whose body lasted until then, else
    /// ``None``.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        match self.reader.close() {
            Some(fed) => read(py, fed),
            None => Ok(None),
        }
    }

    /// Where the reader is: 0 the head, 1 a body by length, 2 chunked, 3 until the server
    /// closes, 4 no answer awaited (the values of `fastctl.kube._http1`'s phases).
    #[getter]
    fn phase(&self) -> u8 {
        match self.reader.phase() {
            Phase::Head => 0,
            Phase::Length => 1,
            Phase::Chunked => 2,
            Phase::UntilClose => 3,
            Phase::Done => 4,
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyHttp1Reader>()
}
