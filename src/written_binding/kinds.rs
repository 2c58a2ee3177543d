//! A followed kind of `Written`: its cache's scope, how its cache is asked what it shows of
//! an object, and its label check of an answer; and which followed kind, if any, a write's
//! resource names (`PyWritten::kind_in_scope`).

use pyo3::intern;
use pyo3::prelude::*;

use super::PyWritten;
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

impl PyWritten {
    /// The index of the followed kind `resource` names, if its cache may hold an object in
    /// `namespace`.
    pub(super) fn kind_in_scope(
        slf: &Bound<'_, Self>,
        resource: &Bound<'_, PyAny>,
        namespace: Option<&str>,
    ) -> PyResult<Option<u32>> {
        let py = slf.py();
        let known = {
            let me = slf.borrow();
            me.seen_resources
                .iter()
                .find(|(r, _)| r.is(resource))
                .map(|(_, k)| *k)
        };
        let kind = match known {
            Some(k) => k,
            None => {
                let group = resource.getattr(intern!(py, "group"))?;
                let name = resource.getattr(intern!(py, "kind"))?;
                let (group, name) = (
                    group.str()?.to_cow()?.into_owned(),
                    name.str()?.to_cow()?.into_owned(),
                );
                let mut me = slf.borrow_mut();
                let k = me
                    .kinds
                    .iter()
                    .position(|k| k.group == group && k.kind == name)
                    .map(|i| i as u32);
                if me.seen_resources.len() < 32 {
                    me.seen_resources.push((resource.clone().unbind(), k));
                }
                k
            }
        };
        let Some(kind) = kind else {
            return Ok(None);
        };
        let Some(ns) = namespace else {
            return Ok(Some(kind)); // a cluster-scoped object: inside every scope
        };
        let set = {
            let me = slf.borrow();
            match &me.kinds[kind as usize].scope {
                Scope::All => return Ok(Some(kind)),
                Scope::One(one) => return Ok((one == ns).then_some(kind)),
                Scope::Set(set) => set.clone_ref(py),
            }
        };
        let covered = set
            .call_method1(py, intern!(py, "covers"), (ns,))?
            .is_truthy(py)?;
        Ok(covered.then_some(kind))
    }
}
