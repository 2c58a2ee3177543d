//! A followed kind of `Written`: its cache's scope, how its cache is asked what it shows of
//! an object, and its label check of an answer.

use pyo3::intern;
use pyo3::prelude::*;

use crate::cache_binding::PyCompactMap;

/// Where a followed kind's cache looks.
pub(super) enum Scope {
    All,
    One(String),
    /// A set of namespaces: asked with ``covers(namespace)``.
    Set(Py<PyAny>),
}

/// How a followed kind's cache is asked what it shows of an object.
pub(super) enum Reader {
    /// A `fastctl.Store`: its table (``_map``, which a relist replaces) is read here, no
    /// call into Python and no tuple made.
    Store(Py<PyAny>),
    /// ``reader(name, namespace)`` → ``(uid, resourceVersion)`` or None: any other mapping.
    Call(Py<PyAny>),
}

impl Reader {
    /// ``(uid, resourceVersion)`` of the object the cache holds (each "" when absent), or
    /// None. Called outside the state's borrow: a reader may run Python code.
    pub(super) fn shown(
        &self,
        py: Python<'_>,
        name: &str,
        namespace: Option<&str>,
    ) -> PyResult<Option<(String, String)>> {
        match self {
            Reader::Store(store) => {
                let map = store.bind(py).getattr(intern!(py, "_map"))?;
                let map = map.cast::<PyCompactMap>()?;
                Ok(PyCompactMap::one(map, name, namespace)
                    .map(|p| (p.uid().to_owned(), p.resource_version().to_owned())))
            }
            Reader::Call(reader) => {
                let shown = reader.call1(py, (name, namespace))?;
                if shown.is_none(py) {
                    return Ok(None);
                }
                let (uid, version): (Option<String>, Option<String>) = shown.extract(py)?;
                Ok(Some((uid.unwrap_or_default(), version.unwrap_or_default())))
            }
        }
    }

    pub(super) fn object(&self) -> &Py<PyAny> {
        match self {
            Reader::Store(o) | Reader::Call(o) => o,
        }
    }
}

/// A followed kind: its (group, kind), its cache's scope, how its cache is asked what it
/// shows of an object, and its label check of an answer (``selector(answer)``), where its
/// cache has one.
pub(super) struct Kind {
    pub(super) group: String,
    pub(super) kind: String,
    pub(super) scope: Scope,
    pub(super) reader: Reader,
    pub(super) selector: Option<Py<PyAny>>,
}
