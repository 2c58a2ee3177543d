//! The Python binding of `written`: `fastctl._core.Written`, the read-your-writes guard's
//! state.
//!
//! Thin: arguments in, results out. Kinds cross as the small integers the Python side gives
//! each cached kind; an event's effect as `seen` (0 applied, 1 deleted, 2 a list's item).
//! A write's record never crosses: a reconcile's writes are kept here under a token (a
//! number) until its fence. Calls go back to Python only outside the state's borrow: a
//! kind's cache reader (for a cache that is not a `Store`, whose table is read here), the
//! count of a start that was held or ran past its bound, the write observer context
//! variable's ``set`` and ``reset``, and the clock a writing reconcile's end is read from.
//!
//! Here, `Written`; beside it, `kinds` (a followed kind's scope, cache reader and label
//! check, and the kind of each write), `read` (the Python values read: an event's effect, a
//! reconciled object's key, a write's answer, whose rules are `crate::written::answer`),
//! `writes` (`Writes`, one async reconcile's observer) and `hook` (`WrittenHook`, each
//! cached kind's event hook).

use pyo3::exceptions::PyValueError;
use pyo3::gc::PyVisit;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;
use pyo3::PyTraverseError;

use crate::frames_binding::PyItem;
use crate::written::{Hold, Written};

mod hook;
mod kinds;
mod read;
mod writes;

use hook::PyWrittenHook;
use kinds::{Kind, Reader, Scope};
use read::{read_answer, seen_of, woken};
use writes::PyWrites;

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
        let w = read_answer(name, answer, deleted, in_selector)?;
        let mut me = slf.borrow_mut();
        let wrote = me.state.answered(
            kind,
            namespace.unwrap_or(""),
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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyWritten>()?;
    m.add_class::<PyWrittenHook>()?;
    m.add_class::<PyWrites>()?;
    Ok(())
}
