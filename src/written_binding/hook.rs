//! `fastctl._core.WrittenHook`: what a cache of a followed kind calls with each event.

use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use super::PyWritten;
use crate::frames_binding::PyItem;
use crate::written::Seen;

/// The event hook of one cached kind: one call per event, nearly nothing while no write is
/// followed. A list frame starts or ends a (re)list; an object's event is read from its
/// decoded frame when it has one (no string made for Python), else from its ``_names()``.
#[pyclass(frozen, name = "WrittenHook", module = "fastctl._core")]
pub struct PyWrittenHook {
    pub(super) written: Py<PyWritten>,
    pub(super) kind: u32,
    pub(super) list_frame: Py<PyAny>,
    pub(super) delete: Py<PyAny>,
    pub(super) init_apply: Py<PyAny>,
    pub(super) init_done: Py<PyAny>,
    pub(super) on_caught_up: Py<PyAny>,
}

#[pymethods]
impl PyWrittenHook {
    fn __call__(&self, py: Python<'_>, event: &Bound<'_, PyAny>) -> PyResult<()> {
        let written = self.written.bind(py);
        if written.borrow().state.idle() {
            return Ok(());
        }
        let kind = event.getattr(intern!(py, "kind"))?;
        let keys = if event.is_instance(self.list_frame.bind(py))? {
            let done = kind.is(self.init_done.bind(py));
            let namespace: Option<String> = event.getattr(intern!(py, "namespace"))?.extract()?;
            written
                .borrow_mut()
                .state
                .list_frame(self.kind, done, namespace.as_deref())
        } else {
            let seen = if kind.is(self.delete.bind(py)) {
                Seen::Delete
            } else if kind.is(self.init_apply.bind(py)) {
                Seen::Listed
            } else {
                Seen::Apply
            };
            let item = event.getattr(intern!(py, "_item"))?;
            if let Ok(item) = item.cast::<PyItem>() {
                let p = &item.get().packed;
                written.borrow_mut().state.saw(
                    self.kind,
                    p.namespace(),
                    p.name(),
                    p.uid(),
                    p.resource_version(),
                    seen,
                )
            } else {
                let names = event.call_method0(intern!(py, "_names"))?;
                let (namespace, name, uid, version): (String, String, String, String) =
                    names.extract()?;
                written
                    .borrow_mut()
                    .state
                    .saw(self.kind, &namespace, &name, &uid, &version, seen)
            }
        };
        if !keys.is_empty() {
            self.on_caught_up.call1(py, (keys,))?;
        }
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.written)?;
        visit.call(&self.list_frame)?;
        visit.call(&self.delete)?;
        visit.call(&self.init_apply)?;
        visit.call(&self.init_done)?;
        visit.call(&self.on_caught_up)
    }
}
