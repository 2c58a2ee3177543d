//! `fastctl._core.Writes`: the observer of one async reconcile's writes.

use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use super::read::plain_key;
use super::PyWritten;

/// The observer of one async reconcile's writes (`fastctl.kube._writes.WriteObserver`):
/// each write is followed and recorded in its `Written` as it starts and ends, under the
/// reconcile's token; `end()` at its end makes them its object's fence. A write that
/// ends after that (a task the reconcile left behind) is recorded nowhere, as before.
#[pyclass(name = "Writes", module = "fastctl._core")]
pub struct PyWrites {
    pub(super) written: Py<PyWritten>,
    pub(super) obj: Py<PyAny>,
    pub(super) token: u64,
    pub(super) ended: bool,
    /// The token of the context variable's ``set`` that made it the write observer.
    pub(super) var_token: Option<Py<PyAny>>,
}

#[pymethods]
impl PyWrites {
    /// A write begins (the observer knows no version to make it conditional on: None).
    fn started(
        &self,
        py: Python<'_>,
        resource: &Bound<'_, PyAny>,
        namespace: Option<&str>,
        name: &str,
    ) -> PyResult<Option<String>> {
        PyWritten::follow(self.written.bind(py), resource, namespace, name)?;
        Ok(None)
    }

    /// A write ended (see `WriteObserver.finished`).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (resource, namespace, name, answer, *, made, based_on, deleted=false))]
    fn finished(
        slf: &Bound<'_, Self>,
        resource: &Bound<'_, PyAny>,
        namespace: Option<&str>,
        name: &str,
        answer: Option<&Bound<'_, PyAny>>,
        made: bool,
        based_on: Option<&Bound<'_, PyAny>>,
        deleted: bool,
    ) -> PyResult<()> {
        let py = slf.py();
        let created = made && based_on.is_none() && !deleted;
        let (written, token, ended) = {
            let me = slf.borrow();
            (me.written.clone_ref(py), me.token, me.ended)
        };
        // After the end: no fence takes it (the write's following is let go all the same).
        let answer = if ended { None } else { answer };
        let token = PyWritten::answered(
            written.bind(py),
            token,
            resource,
            namespace,
            name,
            answer,
            created,
            deleted,
        )?;
        slf.borrow_mut().token = token;
        Ok(())
    }

    /// The number its writes are kept under (0: it recorded none).
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// The reconcile ended: it is the write observer no more (the context variable is
    /// reset), and its writes are its object's fence from the `Written`'s clock (read only
    /// if it wrote).
    fn end(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let (written, token, var_token) = {
            let mut me = slf.borrow_mut();
            me.ended = true;
            (
                me.written.clone_ref(py),
                std::mem::take(&mut me.token),
                me.var_token.take(),
            )
        };
        let written = written.bind(py);
        if let Some(var_token) = var_token {
            let reset = written
                .borrow()
                .observer_var
                .as_ref()
                .map(|(_, reset)| reset.clone_ref(py));
            if let Some(reset) = reset {
                reset.call1(py, (var_token,))?;
            }
        }
        if token == 0 {
            return Ok(());
        }
        let (clock, key_of) = {
            let me = written.borrow();
            (
                me.clock.as_ref().map(|f| f.clone_ref(py)),
                me.key_of.as_ref().map(|f| f.clone_ref(py)),
            )
        };
        let Some(clock) = clock else {
            return Err(PyValueError::new_err("no clock to fence by (set_clock)"));
        };
        let now: f64 = clock.call0(py)?.extract(py)?;
        let obj = slf.borrow().obj.clone_ref(py);
        let obj = obj.bind(py);
        let key = match plain_key(obj)? {
            Some(key) => key,
            None => match key_of {
                Some(f) => f.call1(py, (obj,))?.extract(py)?,
                None => return Err(PyValueError::new_err("no key for this object")),
            },
        };
        written.borrow_mut().state.fence_pending(&key, token, now);
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.written)?;
        visit.call(&self.obj)?;
        if let Some(t) = &self.var_token {
            visit.call(t)?;
        }
        Ok(())
    }
}
