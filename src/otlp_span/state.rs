//! What an `OtlpSpan` holds from its start to its end, kept without copies where it can:
//! attribute keys fastctl sets are `&'static str`, and the strings Python hands over (a
//! controller's name, a key, a request's method and path, a span's name) are the Python
//! strings themselves, shared, not copied into Rust `String`s.

use std::borrow::Cow;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};

use super::SpanSource;

/// A standard sampler's decision at one place (no parent, a local parent sampled or not):
/// 0 drop, 1 record only, 2 record and sample; or a trace id ratio's bound.
#[derive(Clone, Copy)]
pub(super) enum Decide {
    Fixed(u8),
    Ratio(u64),
}

impl Decide {
    pub(super) fn of(self, trace_id: u128) -> u8 {
        match self {
            Decide::Fixed(d) => d,
            Decide::Ratio(bound) => {
                if (trace_id as u64) < bound {
                    2
                } else {
                    0
                }
            }
        }
    }
}

/// A string of a span: fixed, made in Rust, or a Python string kept as it is.
pub(super) enum Text {
    Static(&'static str),
    Owned(String),
    Py(Py<PyString>),
}

impl Text {
    /// The text as UTF-8 (a Python string's own, cached by Python: no copy).
    pub(super) fn get<'a>(&'a self, py: Python<'_>) -> PyResult<&'a str> {
        match self {
            Text::Static(s) => Ok(s),
            Text::Owned(s) => Ok(s),
            Text::Py(s) => s.to_str(py),
        }
    }

    pub(super) fn to_py<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        match self {
            Text::Static(s) => PyString::new(py, s).into_any(),
            Text::Owned(s) => PyString::new(py, s).into_any(),
            Text::Py(s) => s.bind(py).clone().into_any(),
        }
    }

    pub(super) fn clone_ref(&self, py: Python<'_>) -> Text {
        match self {
            Text::Static(s) => Text::Static(s),
            Text::Owned(s) => Text::Owned(s.clone()),
            Text::Py(s) => Text::Py(s.clone_ref(py)),
        }
    }
}

/// An attribute's key: fastctl's own are static; a user's is copied.
pub(super) type Key = Cow<'static, str>;

/// An attribute's value: the scalars fastctl sets, or a value the SDK's checks passed.
pub(super) enum Val {
    Str(Text),
    Bool(bool),
    Int(i64),
    Double(f64),
    Py(Py<PyAny>),
}

/// A scalar's value (a string kept as the Python string), or None: not a scalar.
pub(super) fn val_of(value: &Bound<'_, PyAny>) -> PyResult<Option<Val>> {
    if let Ok(s) = value.cast_exact::<PyString>() {
        s.to_str()?; // as a copy would: a string that is not UTF-8 is refused here
        return Ok(Some(Val::Str(Text::Py(s.clone().unbind()))));
    }
    if let Ok(b) = value.cast_exact::<PyBool>() {
        return Ok(Some(Val::Bool(b.is_true())));
    }
    if value.is_exact_instance_of::<PyInt>() {
        return Ok(value.extract::<i64>().ok().map(Val::Int));
    }
    if let Ok(f) = value.cast_exact::<PyFloat>() {
        return Ok(Some(Val::Double(f.value())));
    }
    Ok(None)
}

/// What a reconcile's span needs at its end for an outcome other than done.
pub(super) struct Run {
    pub(super) owner: Py<PyAny>,
    pub(super) scheduler: Py<PyAny>,
    pub(super) key: Py<PyString>,
    pub(super) priority: i64,
}

pub(super) struct State {
    pub(super) name: Text,
    pub(super) attrs: Vec<(Key, Val)>,
    pub(super) events: Vec<Py<PyAny>>,
    pub(super) links: Vec<Py<PyAny>>,
    pub(super) code: u32,
    pub(super) message: Option<String>,
    pub(super) ended: bool,
    pub(super) token: Option<Py<PyAny>>,
}

impl State {
    pub(super) fn new(name: Text) -> Self {
        Self {
            name,
            attrs: Vec::new(),
            events: Vec::new(),
            links: Vec::new(),
            code: 0,
            message: None,
            ended: false,
            token: None,
        }
    }
}

pub(super) const SAMPLED: u8 = 1;
pub(super) const STATUS_ERROR: u32 = 2;

/// A span of fastctl's own, current in its reconcile's task through OpenTelemetry's API
/// (it is registered as a `opentelemetry.trace.Span`): what user code may do to the current
/// span it does here, and fastctl's hooks call the few methods of its own (`api`).
#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct OtlpSpan {
    pub(super) source: Py<SpanSource>,
    pub(super) trace_id: u128,
    pub(super) span_id: u64,
    pub(super) parent: Option<u64>,
    pub(super) kind: u32,
    pub(super) flags: u8,
    pub(super) start: u64,
    pub(super) recording: bool,
    pub(super) state: Mutex<State>,
    pub(super) context: PyOnceLock<Py<PyAny>>,
    pub(super) run: Option<Run>,
}

impl OtlpSpan {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn put(&self, key: Key, value: Val) {
        let source = self.source.get();
        let mut state = self.lock();
        if state.ended {
            return;
        }
        if let Some(slot) = state.attrs.iter_mut().find(|(k, _)| *k == key) {
            slot.1 = value;
            return;
        }
        if let Some(max) = source.max_attributes {
            if state.attrs.len() >= max {
                return;
            }
        }
        state.attrs.push((key, value));
    }

    pub(super) fn status(&self, code: u32, message: Option<String>) {
        let mut state = self.lock();
        if state.ended || state.code == 1 {
            return; // as the SDK: an OK status is final
        }
        if code != 0 {
            state.code = code;
            state.message = message;
        }
    }

    /// Ends the span: written into its buffer when it is sampled.
    pub(super) fn finish(&self, py: Python<'_>, end: Option<u64>) -> PyResult<()> {
        let end = end.unwrap_or_else(super::now_ns);
        // What the span holds is taken out under the lock and written after it: writing
        // may run Python code (a value's or an event's attributes read), which may let
        // another thread run and call this span; it must not find the lock held.
        let state = {
            let mut state = self.lock();
            if state.ended {
                return Ok(());
            }
            let mut done = State::new(state.name.clone_ref(py));
            done.ended = true;
            done.token = state.token.take(); // the run's context is left by the applier
            if !self.recording {
                *state = done;
                return Ok(());
            }
            std::mem::replace(&mut *state, done)
        };
        let source = self.source.get();
        if let Some(to) = source.retired.get(py) {
            let record = self.record(py, &state, end)?;
            to.call1(py, (record,))?;
            return Ok(());
        }
        if self.flags & SAMPLED == 0 {
            return Ok(());
        }
        let mut w = crate::otlp::Writer::with_capacity(512);
        self.write(py, &mut w, &state, end)?;
        let waiting = source.buffer.get().push(w.as_bytes());
        if waiting == source.batch {
            source.wake.call0(py)?;
        }
        Ok(())
    }

    /// Makes this span current in the caller's context (a reconcile's task): a new OTel
    /// `Context` (a dict) with what was current and this span, set in the context
    /// variable by its own bound methods, looked up once per source.
    pub(super) fn enter_context(&self, slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let source = self.source.get();
        let current = source.var_get.bind(py).call0()?;
        let context = source.context_cls.bind(py).call0()?;
        let dict = context.cast::<pyo3::types::PyDict>()?; // read-only by its own methods
        if let Ok(given) = current.cast::<pyo3::types::PyDict>() {
            if !given.is_empty() {
                for (k, v) in given.iter() {
                    dict.set_item(k, v)?;
                }
            }
        }
        dict.set_item(source.span_key.bind(py), slf)?;
        let token = source.var_set.bind(py).call1((context,))?;
        self.lock().token = Some(token.unbind());
        Ok(())
    }

    pub(super) fn leave_context(&self, py: Python<'_>) {
        let token = self.lock().token.take();
        if let Some(token) = token {
            // In another context (it cannot be: `enter` ran in this task) it is left.
            let _ = self.source.get().var_reset.bind(py).call1((token,));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_decides_on_the_low_64_bits() {
        assert_eq!(Decide::Ratio(10).of(u128::from(u64::MAX) << 64 | 9), 2);
        assert_eq!(Decide::Ratio(10).of(10), 0);
        assert_eq!(Decide::Fixed(1).of(0), 1);
    }
}
