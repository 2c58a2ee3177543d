//! Python values as the guard reads them: an event's effect, the keys to wake, a reconciled
//! object's key and a write's answer (whose rules are `crate::written::answer`'s).

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString};

use crate::written::answer::{outcome, Answer, Outcome};
use crate::written::Seen;

pub(super) fn seen_of(seen: u8) -> PyResult<Seen> {
    match seen {
        0 => Ok(Seen::Apply),
        1 => Ok(Seen::Delete),
        2 => Ok(Seen::Listed),
        _ => Err(PyValueError::new_err(format!(
            "seen must be 0, 1 or 2, got {seen}"
        ))),
    }
}

pub(super) fn woken(keys: Vec<String>) -> Option<Vec<String>> {
    (!keys.is_empty()).then_some(keys)
}

/// `obj[key]` of a mapping (a dict read directly), None if absent; None if `obj` is no
/// mapping at all.
pub(super) fn get<'py>(
    obj: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(d) = obj.cast::<PyDict>() {
        return d.get_item(key);
    }
    if obj.cast::<PyMapping>().is_err() {
        return Ok(None);
    }
    match obj.get_item(key) {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyError>(obj.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// `obj[key]` if `obj` is a mapping and the value is one too.
pub(super) fn get_mapping<'py>(
    obj: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(get(obj, key)?.filter(|v| v.cast::<PyDict>().is_ok() || v.cast::<PyMapping>().is_ok()))
}

/// ``str(value or "")``, as the Python side read an answer's fields.
pub(super) fn text(value: Option<Bound<'_, PyAny>>) -> PyResult<String> {
    match value {
        Some(v) if v.is_truthy()? => Ok(v.str()?.to_cow()?.into_owned()),
        _ => Ok(String::new()),
    }
}

/// The scheduler key of a plain reconciled object (a dict whose metadata names it), as
/// `ObjectRef.key`; None for anything else.
pub(super) fn plain_key(obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    let Ok(d) = obj.cast::<PyDict>() else {
        return Ok(None);
    };
    let py = obj.py();
    let Some(meta) = d.get_item(intern!(py, "metadata"))? else {
        return Ok(None);
    };
    let Ok(meta) = meta.cast::<PyDict>() else {
        return Ok(None);
    };
    let Some(name) = meta.get_item(intern!(py, "name"))? else {
        return Ok(None);
    };
    let Ok(name) = name.cast::<PyString>() else {
        return Ok(None);
    };
    let name = name.to_cow()?;
    if name.is_empty() {
        return Ok(None);
    }
    let namespace = match meta.get_item(intern!(py, "namespace"))? {
        Some(ns) if ns.is_truthy()? => match ns.cast::<PyString>() {
            Ok(ns) => Some(ns.to_cow()?.into_owned()),
            Err(_) => return Ok(None),
        },
        _ => None,
    };
    Ok(Some(match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.into_owned(),
    }))
}

/// A write's answer as a Python mapping (`crate::written::answer::Answer`): its metadata
/// looked up once, each field read with an interned key.
struct PyAnswer<'py> {
    answer: Bound<'py, PyAny>,
    meta: Option<Bound<'py, PyAny>>,
}

impl<'py> PyAnswer<'py> {
    fn of(answer: &Bound<'py, PyAny>) -> PyResult<Self> {
        let meta = get_mapping(answer, intern!(answer.py(), "metadata"))?;
        Ok(PyAnswer {
            answer: answer.clone(),
            meta,
        })
    }

    fn field(&self, key: &Bound<'py, PyString>) -> PyResult<String> {
        match &self.meta {
            Some(m) => text(get(m, key)?),
            None => Ok(String::new()),
        }
    }
}

impl Answer for PyAnswer<'_> {
    type Error = PyErr;

    fn name(&self) -> PyResult<String> {
        self.field(intern!(self.answer.py(), "name"))
    }

    fn uid(&self) -> PyResult<String> {
        let py = self.answer.py();
        let uid = self.field(intern!(py, "uid"))?;
        if !uid.is_empty() {
            return Ok(uid);
        }
        match get_mapping(&self.answer, intern!(py, "details"))? {
            Some(details) => text(get(&details, intern!(py, "uid"))?),
            None => Ok(uid),
        }
    }

    fn version(&self) -> PyResult<String> {
        self.field(intern!(self.answer.py(), "resourceVersion"))
    }

    fn still_there(&self) -> PyResult<bool> {
        let Some(m) = &self.meta else {
            return Ok(false);
        };
        let py = self.answer.py();
        let marked = get(m, intern!(py, "deletionTimestamp"))?;
        let finalizers = get(m, intern!(py, "finalizers"))?;
        Ok(marked.map_or(Ok(false), |v| v.is_truthy())?
            && finalizers.map_or(Ok(false), |v| v.is_truthy())?)
    }
}

/// Read a write's `answer` (None: it failed) of `name` (see `written::answer::outcome`).
pub(super) fn read_answer(
    name: &str,
    answer: Option<&Bound<'_, PyAny>>,
    deleted: bool,
    in_selector: bool,
) -> PyResult<Outcome> {
    let answer = answer.map(PyAnswer::of).transpose()?;
    outcome(name, answer.as_ref(), deleted, in_selector)
}
