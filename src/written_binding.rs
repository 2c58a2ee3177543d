//! The Python binding of `written`: `fastctl._core.Written`, the read-your-writes guard's
//! state.
//!
//! Thin: arguments in, results out. Kinds cross as the small integers the Python side gives
//! each cached kind; an event's effect as `seen` (0 applied, 1 deleted, 2 a list's item).
//! A write's record never crosses: a reconcile's writes are kept here under a token (a
//! number) until its fence. Two calls go back to Python, each outside the state's borrow:
//! a kind's cache reader (what the cache shows of an object newly followed) and the count
//! of a start that was held or ran past its bound.

use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString};
use pyo3::PyTraverseError;

use crate::cache_binding::{PyCompactMap, PyItem};
use crate::written::{Hold, Seen, Written};

fn seen_of(seen: u8) -> PyResult<Seen> {
    match seen {
        0 => Ok(Seen::Apply),
        1 => Ok(Seen::Delete),
        2 => Ok(Seen::Listed),
        _ => Err(PyValueError::new_err(format!(
            "seen must be 0, 1 or 2, got {seen}"
        ))),
    }
}

fn woken(keys: Vec<String>) -> Option<Vec<String>> {
    (!keys.is_empty()).then_some(keys)
}

/// `obj[key]` of a mapping (a dict read directly), None if absent; None if `obj` is no
/// mapping at all.
fn get<'py>(
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
fn get_mapping<'py>(
    obj: &Bound<'py, PyAny>,
    key: &Bound<'py, PyString>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(get(obj, key)?.filter(|v| v.cast::<PyDict>().is_ok() || v.cast::<PyMapping>().is_ok()))
}

/// ``str(value or "")``, as the Python side read an answer's fields.
fn text(value: Option<Bound<'_, PyAny>>) -> PyResult<String> {
    match value {
        Some(v) if v.is_truthy()? => Ok(v.str()?.to_cow()?.into_owned()),
        _ => Ok(String::new()),
    }
}

/// The followed objects and fences of one controller run (see `crate::written`).
#[pyclass(name = "Written", module = "fastctl._core")]
pub struct PyWritten {
    state: Written,
    /// The followed kinds, by their index.
    kinds: Vec<Kind>,
    /// The kind of each resource object a write named lately, by identity (a few objects
    /// name every write of a controller): its index, or None if no cache reads it.
    seen_resources: Vec<(Py<PyAny>, Option<u32>)>,
    /// ``on_started(key, waited, was_held, expired, missing)``: a start to count.
    on_started: Option<Py<PyAny>>,
    /// ``key_of(obj)``: the scheduler key of a reconciled object that is not a plain dict.
    key_of: Option<Py<PyAny>>,
    /// The write observer context variable's ``set`` and ``reset`` (`begin`, `Writes.end`).
    observer_var: Option<(Py<PyAny>, Py<PyAny>)>,
    /// ``clock()``: the time a writing reconcile ends at (`Writes.end`).
    clock: Option<Py<PyAny>>,
}

/// Where a followed kind's cache looks.
enum Scope {
    All,
    One(String),
    /// A set of namespaces: asked with ``covers(namespace)``.
    Set(Py<PyAny>),
}

/// How a followed kind's cache is asked what it shows of an object.
enum Reader {
    /// A `fastctl.Store`: its table (``_map``, which a relist replaces) is read here, no
    /// call into Python and no tuple made.
    Store(Py<PyAny>),
    /// ``reader(name, namespace)`` → ``(uid, resourceVersion)`` or None: any other mapping.
    Call(Py<PyAny>),
}

impl Reader {
    /// ``(uid, resourceVersion)`` of the object the cache holds (each "" when absent), or
    /// None. Called outside the state's borrow: a reader may run Python code.
    fn shown(
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

    fn object(&self) -> &Py<PyAny> {
        match self {
            Reader::Store(o) | Reader::Call(o) => o,
        }
    }
}

/// A followed kind: its (group, kind), its cache's scope, how its cache is asked what it
/// shows of an object, and its label check of an answer (``selector(answer)``), where its
/// cache has one.
struct Kind {
    group: String,
    kind: String,
    scope: Scope,
    reader: Reader,
    selector: Option<Py<PyAny>>,
}

/// The scheduler key of a plain reconciled object (a dict whose metadata names it), as
/// `ObjectRef.key`; None for anything else.
fn plain_key(obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
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

#[pymethods]
impl PyWritten {
    #[new]
    fn new(max_wait: f64) -> PyResult<Self> {
        if !(max_wait.is_finite() && max_wait > 0.0) {
            return Err(PyValueError::new_err(format!(
                "max_wait must be a finite number of seconds > 0, got {max_wait}"
            )));
        }
        Ok(PyWritten {
            state: Written::new(max_wait),
            kinds: Vec::new(),
            seen_resources: Vec::new(),
            on_started: None,
            key_of: None,
            observer_var: None,
            clock: None,
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for k in &self.kinds {
            if let Scope::Set(set) = &k.scope {
                visit.call(set)?;
            }
            visit.call(k.reader.object())?;
            if let Some(selector) = &k.selector {
                visit.call(selector)?;
            }
        }
        for (resource, _) in &self.seen_resources {
            visit.call(resource)?;
        }
        if let Some(f) = &self.on_started {
            visit.call(f)?;
        }
        if let Some(f) = &self.key_of {
            visit.call(f)?;
        }
        if let Some((set, reset)) = &self.observer_var {
            visit.call(set)?;
            visit.call(reset)?;
        }
        if let Some(f) = &self.clock {
            visit.call(f)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.kinds.clear();
        self.seen_resources.clear();
        self.on_started = None;
        self.key_of = None;
        self.observer_var = None;
        self.clock = None;
    }

    /// How many objects have a fence.
    fn __len__(&self) -> usize {
        self.state.fenced_count()
    }

    /// How many objects are followed.
    #[getter]
    fn followed(&self) -> usize {
        self.state.followed()
    }

    /// How many reconciles have recorded writes not fenced yet.
    #[getter]
    fn pending(&self) -> usize {
        self.state.pending_count()
    }

    /// Whether held keys are woken (someone is bound to wake them).
    fn set_waking(&mut self, waking: bool) {
        self.state.set_waking(waking);
    }

    /// The next followed kind (its index is how many came before): its `group` and
    /// `kind`, its cache's `scope` (None: every namespace; a name; or a set, asked with
    /// ``covers(namespace)``), its cache's `reader` and label check (`selector`, if any).
    /// `store`: the reader is a `fastctl.Store`, whose table is read here; else a callable
    /// ``reader(name, namespace)`` → ``(uid, resourceVersion)`` or None.
    #[pyo3(signature = (group, kind, scope, reader, selector=None, store=false))]
    fn add_kind(
        &mut self,
        group: &str,
        kind: &str,
        scope: Option<&Bound<'_, PyAny>>,
        reader: Py<PyAny>,
        selector: Option<Py<PyAny>>,
        store: bool,
    ) -> PyResult<u32> {
        let reader = if store {
            Reader::Store(reader)
        } else {
            Reader::Call(reader)
        };
        let scope = match scope {
            None => Scope::All,
            Some(s) => match s.cast::<PyString>() {
                Ok(one) => Scope::One(one.to_cow()?.into_owned()),
                Err(_) => Scope::Set(s.clone().unbind()),
            },
        };
        self.kinds.push(Kind {
            group: group.to_owned(),
            kind: kind.to_owned(),
            scope,
            reader,
            selector,
        });
        self.seen_resources.clear();
        Ok((self.kinds.len() - 1) as u32)
    }

    /// Who counts a start that was held or ran past its bound (see `hold`).
    fn set_on_started(&mut self, on_started: Option<Py<PyAny>>) {
        self.on_started = on_started;
    }

    /// How the key of a reconciled object that is not a plain dict is made (`fence`).
    fn set_key_of(&mut self, key_of: Option<Py<PyAny>>) {
        self.key_of = key_of;
    }

    /// The context variable `begin` sets each observer as (`Writes.end` resets it).
    fn set_observer_var(&mut self, var: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = var.py();
        self.observer_var = Some((
            var.getattr(intern!(py, "set"))?.unbind(),
            var.getattr(intern!(py, "reset"))?.unbind(),
        ));
        Ok(())
    }

    /// The clock a writing reconcile's end is read from (`Writes.end`).
    fn set_clock(&mut self, clock: Py<PyAny>) {
        self.clock = Some(clock);
    }

    /// A write to `resource` begins: its object is followed from now, seeded with what
    /// its cache shows if it was not followed (a write that changes nothing is answered
    /// with that version). Nothing if no cache of the guard reads it there.
    fn follow(
        slf: &Bound<'_, Self>,
        resource: &Bound<'_, PyAny>,
        namespace: Option<&str>,
        name: &str,
    ) -> PyResult<()> {
        let py = slf.py();
        let Some(kind) = Self::kind_in_scope(slf, resource, namespace)? else {
            return Ok(());
        };
        let ns = namespace.unwrap_or("");
        let reader = {
            let mut me = slf.borrow_mut();
            if !me.state.follow(kind, ns, name) {
                return Ok(());
            }
            match &me.kinds[kind as usize].reader {
                Reader::Store(o) => Reader::Store(o.clone_ref(py)),
                Reader::Call(o) => Reader::Call(o.clone_ref(py)),
            }
        };
        let namespace = namespace.filter(|n| !n.is_empty());
        if let Some((uid, version)) = reader.shown(py, name, namespace)? {
            slf.borrow_mut().state.seed(kind, ns, name, &uid, &version);
        }
        Ok(())
    }

    /// A write to `resource` ended with `answer` (None: it failed): what a cache must
    /// show of it is kept under the reconcile's `token` (0: none yet). Returns the token
    /// (a new one at the first recorded write, 0 while none is).
    #[allow(clippy::too_many_arguments)]
    fn answered(
        slf: &Bound<'_, Self>,
        token: u64,
        resource: &Bound<'_, PyAny>,
        namespace: Option<&str>,
        name: &str,
        answer: Option<&Bound<'_, PyAny>>,
        created: bool,
        deleted: bool,
    ) -> PyResult<u64> {
        let py = slf.py();
        let Some(kind) = Self::kind_in_scope(slf, resource, namespace)? else {
            return Ok(token);
        };
        let mut in_selector = true;
        if let Some(answer) = answer {
            let selector = slf.borrow().kinds[kind as usize]
                .selector
                .as_ref()
                .map(|s| s.clone_ref(py));
            if let Some(selector) = selector {
                in_selector = selector.call1(py, (answer,))?.is_truthy(py)?;
            }
        }
        let w = read_answer(namespace.unwrap_or(""), name, answer, deleted, in_selector)?;
        let mut me = slf.borrow_mut();
        let wrote = me.state.answered(
            kind,
            &w.namespace,
            name,
            &w.target,
            &w.uid,
            w.version.as_deref(),
            w.recorded,
            created,
            deleted,
        );
        Ok(match wrote {
            Some(wrote) => me.state.record(token, wrote),
            None => token,
        })
    }

    /// The observer of one async reconcile's writes (of `obj`), on the loop's thread, set
    /// as the current context's write observer (`set_observer_var`) until its `end()`.
    fn begin(slf: &Bound<'_, Self>, obj: Py<PyAny>) -> PyResult<Py<PyWrites>> {
        let py = slf.py();
        let writes = Py::new(
            py,
            PyWrites {
                written: slf.clone().unbind(),
                obj,
                token: 0,
                ended: false,
                var_token: None,
            },
        )?;
        let set = slf
            .borrow()
            .observer_var
            .as_ref()
            .map(|(set, _)| set.clone_ref(py));
        if let Some(set) = set {
            let token = set.call1(py, (writes.clone_ref(py),))?;
            writes.borrow_mut(py).var_token = Some(token);
        }
        Ok(writes)
    }

    /// Whether the cache has applied every write kept under `token`.
    fn shown(&self, token: u64) -> bool {
        self.state.pending_shown(token)
    }

    /// An event of one object that a cache of `kind` applied: the held keys to wake (None).
    fn saw(
        &mut self,
        kind: u32,
        namespace: &str,
        name: &str,
        uid: &str,
        version: &str,
        seen: u8,
    ) -> PyResult<Option<Vec<String>>> {
        let seen = seen_of(seen)?;
        Ok(woken(
            self.state.saw(kind, namespace, name, uid, version, seen),
        ))
    }

    /// `saw` of a decoded object: its fields read here, no string made for Python.
    fn saw_item(
        &mut self,
        kind: u32,
        item: &Bound<'_, PyItem>,
        seen: u8,
    ) -> PyResult<Option<Vec<String>>> {
        let seen = seen_of(seen)?;
        let p = &item.get().packed;
        let keys = self.state.saw(
            kind,
            p.namespace(),
            p.name(),
            p.uid(),
            p.resource_version(),
            seen,
        );
        Ok(woken(keys))
    }

    /// A list frame of `kind`: its start or (`done`) its end; `namespace` for one
    /// namespace's list of a set. The held keys to wake, or None.
    #[pyo3(signature = (kind, done, namespace=None))]
    fn list_frame(
        &mut self,
        kind: u32,
        done: bool,
        namespace: Option<&str>,
    ) -> Option<Vec<String>> {
        woken(self.state.list_frame(kind, done, namespace))
    }

    /// The reconcile of `key` ended at `now`, its writes kept under `token`: its fence.
    fn fence(&mut self, key: &str, token: u64, now: f64) {
        self.state.fence_pending(key, token, now);
    }

    /// The reconcile of `key` is about to start at `now`: None to start, or the seconds to
    /// wait at most. A start after a hold, or at the bound, is told to `on_started` first.
    fn hold(slf: &Bound<'_, Self>, key: &str, now: f64) -> PyResult<Option<f64>> {
        let decision = slf.borrow_mut().state.hold(key, now);
        match decision {
            Hold::Start(None) => Ok(None),
            Hold::Wait(wait) => Ok(Some(wait)),
            Hold::Start(Some(s)) => {
                let py = slf.py();
                let count = slf.borrow().on_started.as_ref().map(|f| f.clone_ref(py));
                if let Some(count) = count {
                    count.call1(py, (key, s.waited, s.was_held, s.expired, s.missing))?;
                }
                Ok(None)
            }
        }
    }

    /// `key` will not start: forget its fence and hold.
    fn release(&mut self, key: &str) {
        self.state.release(key);
    }

    /// What a cache of `kind` calls with each event it applied (a `WrittenHook`): the
    /// watch's event classes and kinds to tell them apart, and who wakes the held keys an
    /// event caught up (``on_caught_up(keys)``).
    #[allow(clippy::too_many_arguments)]
    fn hook(
        slf: &Bound<'_, Self>,
        kind: u32,
        list_frame: Py<PyAny>,
        delete: Py<PyAny>,
        init_apply: Py<PyAny>,
        init_done: Py<PyAny>,
        on_caught_up: Py<PyAny>,
    ) -> PyWrittenHook {
        PyWrittenHook {
            written: slf.clone().unbind(),
            kind,
            list_frame,
            delete,
            init_apply,
            init_done,
            on_caught_up,
        }
    }
}

impl PyWritten {
    /// The index of the followed kind `resource` names, if its cache may hold an object in
    /// `namespace`.
    fn kind_in_scope(
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

/// What a write's answer says a cache must show.
struct Answer {
    namespace: String,
    target: String,
    uid: String,
    version: Option<String>,
    recorded: bool,
}

/// Read a write's `answer` (None: it failed): the object's name (`name`, or the answer's
/// for a create by ``generateName``), UID (a delete's Status names it in its details) and
/// version (None for a DELETE that removed the object; a DELETE that finalizers hold up is
/// answered with the object marked for deletion). `recorded`: a cache will show it (it
/// succeeded, names an object, is inside the cache's label selector).
fn read_answer(
    namespace: &str,
    name: &str,
    answer: Option<&Bound<'_, PyAny>>,
    deleted: bool,
    in_selector: bool,
) -> PyResult<Answer> {
    let Some(answer) = answer else {
        return Ok(Answer {
            namespace: namespace.to_owned(),
            target: name.to_owned(),
            uid: String::new(),
            version: None,
            recorded: false,
        });
    };
    let py = answer.py();
    let meta = get_mapping(answer, intern!(py, "metadata"))?;
    let field = |key: &Bound<'_, PyString>| -> PyResult<String> {
        match &meta {
            Some(m) => text(get(m, key)?),
            None => Ok(String::new()),
        }
    };
    let target = if name.is_empty() {
        field(intern!(py, "name"))?
    } else {
        name.to_owned()
    };
    let mut uid = field(intern!(py, "uid"))?;
    if uid.is_empty() {
        if let Some(details) = get_mapping(answer, intern!(py, "details"))? {
            uid = text(get(&details, intern!(py, "uid"))?)?;
        }
    }
    let recorded = !target.is_empty() && (!uid.is_empty() || deleted) && in_selector;
    let mut version = None;
    if recorded {
        // A DELETE's answer has a version to wait for only while finalizers keep the
        // object (marked for deletion); any other write's answer always has one.
        let still_there = || -> PyResult<bool> {
            let Some(m) = &meta else {
                return Ok(false);
            };
            let marked = get(m, intern!(py, "deletionTimestamp"))?;
            let finalizers = get(m, intern!(py, "finalizers"))?;
            Ok(marked.map_or(Ok(false), |v| v.is_truthy())?
                && finalizers.map_or(Ok(false), |v| v.is_truthy())?)
        };
        if !deleted || still_there()? {
            version = Some(field(intern!(py, "resourceVersion"))?).filter(|v| !v.is_empty());
        }
    }
    Ok(Answer {
        namespace: namespace.to_owned(),
        target,
        uid,
        version,
        recorded,
    })
}

/// The observer of one async reconcile's writes (`fastctl.kube._writes.WriteObserver`):
/// each write is followed and recorded in its `Written` as it starts and ends, under the
/// reconcile's token; `end()` at its end makes them its object's fence. A write that
/// ends after that (a task the reconcile left behind) is recorded nowhere, as before.
#[pyclass(name = "Writes", module = "fastctl._core")]
pub struct PyWrites {
    written: Py<PyWritten>,
    obj: Py<PyAny>,
    token: u64,
    ended: bool,
    /// The token of the context variable's ``set`` that made it the write observer.
    var_token: Option<Py<PyAny>>,
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

/// The event hook of one cached kind: one call per event, nearly nothing while no write is
/// followed. A list frame starts or ends a (re)list; an object's event is read from its
/// decoded frame when it has one (no string made for Python), else from its ``_names()``.
#[pyclass(frozen, name = "WrittenHook", module = "fastctl._core")]
pub struct PyWrittenHook {
    written: Py<PyWritten>,
    kind: u32,
    list_frame: Py<PyAny>,
    delete: Py<PyAny>,
    init_apply: Py<PyAny>,
    init_done: Py<PyAny>,
    on_caught_up: Py<PyAny>,
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWritten>()?;
    m.add_class::<PyWrittenHook>()?;
    m.add_class::<PyWrites>()?;
    Ok(())
}
