//! The Python binding of `tls`: `fastctl._core.TlsConfig` and `TlsSession`, the lean
//! transport's TLS (`fastctl.kube._http1.TlsConnection` feeds a session from the socket).
//!
//! Thin: a configuration `tls` does not take is a `ValueError` (the transport keeps
//! Python's `ssl`); a refused certificate is `ssl.SSLCertVerificationError` and any other
//! TLS failure `ssl.SSLError`, the errors of Python's `ssl`, so the transport reports them
//! as it did.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rustls::ClientConfig;

use crate::tls::{self, ErrorKind, Session};

/// A read or write at least this long is handled without holding the GIL.
const DETACH_FROM: usize = 64 * 1024;

pub(crate) fn error(py: Python<'_>, error: tls::Error) -> PyErr {
    let name = match error.kind {
        ErrorKind::Unsupported => return PyValueError::new_err(error.message),
        ErrorKind::Certificate => "SSLCertVerificationError",
        ErrorKind::Protocol => "SSLError",
    };
    match py
        .import("ssl")
        .and_then(|ssl| ssl.getattr(name)?.call1((error.message,)))
    {
        Ok(exc) => PyErr::from_value(exc),
        Err(err) => err,
    }
}

/// The TLS settings of one API server, from the PEM bytes of its kubeconfig's files:
/// ``TlsConfig(ca, cert, key, verify)``; a `ValueError` says what cannot be loaded.
#[pyclass(name = "TlsConfig", module = "fastctl._core", frozen)]
pub struct PyTlsConfig {
    config: Arc<ClientConfig>,
}

#[pymethods]
impl PyTlsConfig {
    #[new]
    #[pyo3(signature = (ca=None, cert=None, key=None, verify=true))]
    fn new(
        py: Python<'_>,
        ca: Option<&[u8]>,
        cert: Option<&[u8]>,
        key: Option<&[u8]>,
        verify: bool,
    ) -> PyResult<Self> {
        let config = tls::client_config(ca, cert, key, verify).map_err(|e| error(py, e))?;
        Ok(PyTlsConfig { config })
    }
}

/// One connection's TLS: ``start()`` gives the first bytes to send, ``feed(data)`` takes a
/// read of the socket and gives ``(plaintext, to_send)`` (``to_send`` is ``None`` when
/// there is nothing), ``encrypt(data)`` gives the records of a request.
#[pyclass(name = "TlsSession", module = "fastctl._core")]
pub struct PyTlsSession {
    pub(crate) session: Session,
}

#[pymethods]
impl PyTlsSession {
    #[new]
    fn new(py: Python<'_>, config: &PyTlsConfig, server_name: &str) -> PyResult<Self> {
        let session = Session::new(config.config.clone(), server_name).map_err(|e| error(py, e))?;
        Ok(PyTlsSession { session })
    }

    /// The ClientHello.
    fn start<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.session.output())
    }

    fn feed<'py>(
        &mut self,
        py: Python<'py>,
        data: &[u8],
    ) -> PyResult<(Bound<'py, PyBytes>, Option<Bound<'py, PyBytes>>)> {
        let session = &mut self.session;
        let fed = if data.len() >= DETACH_FROM {
            py.detach(|| session.feed(data))
        } else {
            session.feed(data)
        }
        .map_err(|e| error(py, e))?;
        let out = (!fed.out.is_empty()).then(|| PyBytes::new(py, &fed.out));
        Ok((PyBytes::new(py, &fed.plain), out))
    }

    fn encrypt<'py>(&mut self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let session = &mut self.session;
        let records = if data.len() >= DETACH_FROM {
            py.detach(|| session.encrypt(data))
        } else {
            session.encrypt(data)
        }
        .map_err(|e| error(py, e))?;
        Ok(PyBytes::new(py, &records))
    }

    /// The close_notify alert.
    fn close<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.session.close())
    }

    #[getter]
    fn handshaking(&self) -> bool {
        self.session.handshaking()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTlsConfig>()?;
    m.add_class::<PyTlsSession>()
}
