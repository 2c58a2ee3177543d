//! `OtlpSpan`: a span of fastctl's own (a reconcile's, a request's) kept in Rust from its
//! start to its end, and written as an OTLP `Span` into its `SpanBuffer` when it ends, for
//! the export `fastctl._otlp.OtlpExport` (what `fastctl run --tracing` builds). Made by a
//! `SpanSource` (one per buffer), which draws the ids and asks the standard sampler's
//! decision itself; the rare paths (an event, a status, a value that is not a scalar) call
//! back into `fastctl._otel_fast`. Python so allocates almost nothing for a traced
//! reconcile: this object, and the one OTel context that makes it current.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::otlp::{field, span_flags, Writer};
use crate::otlp_binding::{any_value, write_event, write_link, SpanBuffer};

const SAMPLED: u8 = 1;
const KIND_INTERNAL: u32 = 1;
const KIND_CLIENT: u32 = 3;
const STATUS_ERROR: u32 = 2;

/// A standard sampler's decision at one place (no parent, a local parent sampled or not):
/// 0 drop, 1 record only, 2 record and sample; or a trace id ratio's bound.
#[derive(Clone, Copy)]
enum Decide {
    Fixed(u8),
    Ratio(u64),
}

impl Decide {
    fn of(self, trace_id: u128) -> u8 {
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

/// An attribute's value: the scalars fastctl sets, or a value the SDK's checks passed.
enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Py(Py<PyAny>),
}

fn val_of(value: &Bound<'_, PyAny>) -> PyResult<Option<Val>> {
    if let Ok(s) = value.cast_exact::<PyString>() {
        return Ok(Some(Val::Str(s.to_str()?.to_owned())));
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

/// Makes `OtlpSpan`s into one buffer.
#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct SpanSource {
    buffer: Py<SpanBuffer>,
    helpers: Py<PyAny>,
    wake: Py<PyAny>,
    batch: usize,
    decide: [Decide; 3],
    random: u8,
    max_attributes: Option<usize>,
    max_events: Option<usize>,
    max_links: Option<usize>,
    var: Py<PyAny>,
    context_cls: Py<PyAny>,
    span_key: Py<PyString>,
    rng: AtomicU64,
    pid: AtomicU32,
    /// Set when the provider's processors changed (`retire`): spans ending from then on
    /// are handed to this callable as records, for the SDK's processors.
    retired: PyOnceLock<Py<PyAny>>,
    /// An id generator of the user's (None: the SDK's random one, whose ids are drawn
    /// here instead).
    ids: Option<Py<PyAny>>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

#[pymethods]
impl SpanSource {
    /// `decide`: ``(kind, value)`` for no parent, a local parent sampled, a local parent
    /// not sampled (kind 0: a fixed decision, 1: a ratio's bound); `limits`: the span
    /// limits (attributes, events, links; None: none); `context`: OTel's context variable,
    /// its `Context` class and the key of the current span.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        buffer: Py<SpanBuffer>,
        helpers: Py<PyAny>,
        wake: Py<PyAny>,
        batch: usize,
        decide: [(u8, u64); 3],
        random: u8,
        limits: (Option<usize>, Option<usize>, Option<usize>),
        context: (Py<PyAny>, Py<PyAny>, Py<PyString>),
        seed: u64,
        ids: Option<Py<PyAny>>,
    ) -> Self {
        let decide = decide.map(|(k, v)| {
            if k == 0 {
                Decide::Fixed(v as u8)
            } else {
                Decide::Ratio(v)
            }
        });
        Self {
            buffer,
            helpers,
            wake,
            batch,
            decide,
            random,
            max_attributes: limits.0,
            max_events: limits.1,
            max_links: limits.2,
            var: context.0,
            context_cls: context.1,
            span_key: context.2,
            rng: AtomicU64::new(seed),
            pid: AtomicU32::new(std::process::id()),
            retired: PyOnceLock::new(),
            ids,
        }
    }

    /// The provider's processors changed: the spans of this source that end from now on
    /// go to `to` (a record each, `OtlpSpan`'s `record`), not into the buffer.
    fn retire(&self, py: Python<'_>, to: Py<PyAny>) {
        let _ = self.retired.set(py, to);
    }

    /// The span of one reconcile, a root, started now: its attributes (the optional ones
    /// None when absent), the links of what triggered it (`fastctl._otel.EventLink` tuples
    /// or the SDK's `Link`s), and what `end` needs (its controller's tracing, the
    /// scheduler, the key and its priority).
    #[allow(clippy::too_many_arguments)]
    fn reconcile(
        slf: &Bound<'_, Self>,
        name: String,
        controller: String,
        key: String,
        attempt: i64,
        priority: i64,
        queue_wait: Option<f64>,
        links_dropped: i64,
        group: Option<Bound<'_, PyAny>>,
        links: Option<Bound<'_, PyAny>>,
        owner: Py<PyAny>,
        scheduler: Py<PyAny>,
    ) -> PyResult<OtlpSpan> {
        let source = slf.get();
        let trace_id = source.trace_id(slf.py())?;
        let decision = source.decide[0].of(trace_id);
        let mut state = State::new(name);
        if decision != 0 {
            let attrs = &mut state.attrs;
            attrs.push(("fastctl.controller".into(), Val::Str(controller)));
            attrs.push(("fastctl.object".into(), Val::Str(key.clone())));
            attrs.push(("fastctl.reconcile.attempt".into(), Val::Int(attempt)));
            if let Some(wait) = queue_wait {
                attrs.push(("fastctl.reconcile.queue_wait".into(), Val::Double(wait)));
            }
            if links_dropped != 0 {
                let dropped = Val::Int(links_dropped);
                attrs.push(("fastctl.reconcile.links_dropped".into(), dropped));
            }
            attrs.push(("fastctl.reconcile.priority".into(), Val::Int(priority)));
            if let Some(group) = group {
                let value = val_of(&group)?.unwrap_or_else(|| Val::Py(group.unbind()));
                attrs.push(("fastctl.reconcile.fair_group".into(), value));
            }
            if let Some(links) = links {
                if links.cast_exact::<PyList>().is_ok() {
                    for link in links.try_iter()? {
                        state.links.push(link?.unbind());
                    }
                } else {
                    state.links.push(links.unbind());
                }
                if let Some(max) = source.max_links {
                    state.links.truncate(max);
                }
            }
        }
        let run = Run {
            owner,
            scheduler,
            key,
            priority,
        };
        source.span(
            slf,
            trace_id,
            None,
            KIND_INTERNAL,
            decision,
            state,
            Some(run),
        )
    }
}

impl SpanSource {
    fn next(&self) -> u64 {
        let pid = std::process::id();
        if self.pid.load(Ordering::Relaxed) != pid {
            // A forked child: its ids must not repeat its parent's.
            self.pid.store(pid, Ordering::Relaxed);
            let old = self.rng.load(Ordering::Relaxed);
            self.rng.store(
                mix(old ^ u64::from(pid) << 32 ^ now_ns()),
                Ordering::Relaxed,
            );
        }
        mix(self
            .rng
            .fetch_add(GOLDEN, Ordering::Relaxed)
            .wrapping_add(GOLDEN))
    }

    fn span_id(&self, py: Python<'_>) -> PyResult<u64> {
        if let Some(ids) = &self.ids {
            return ids
                .call_method0(py, intern!(py, "generate_span_id"))?
                .extract(py);
        }
        loop {
            let id = self.next();
            if id != 0 {
                return Ok(id);
            }
        }
    }

    fn trace_id(&self, py: Python<'_>) -> PyResult<u128> {
        if let Some(ids) = &self.ids {
            return ids
                .call_method0(py, intern!(py, "generate_trace_id"))?
                .extract(py);
        }
        loop {
            let id = u128::from(self.next()) << 64 | u128::from(self.next());
            if id != 0 {
                return Ok(id);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        slf: &Bound<'_, Self>,
        trace_id: u128,
        parent: Option<u64>,
        kind: u32,
        decision: u8,
        state: State,
        run: Option<Run>,
    ) -> PyResult<OtlpSpan> {
        let sampled = if decision == 2 { SAMPLED } else { 0 };
        Ok(OtlpSpan {
            source: slf.clone().unbind(),
            trace_id,
            span_id: self.span_id(slf.py())?,
            parent,
            kind,
            flags: sampled | self.random,
            start: now_ns(),
            recording: decision != 0,
            state: Mutex::new(state),
            context: PyOnceLock::new(),
            run,
        })
    }
}

struct Run {
    owner: Py<PyAny>,
    scheduler: Py<PyAny>,
    key: String,
    priority: i64,
}

struct State {
    name: String,
    attrs: Vec<(String, Val)>,
    events: Vec<Py<PyAny>>,
    links: Vec<Py<PyAny>>,
    code: u32,
    message: Option<String>,
    ended: bool,
    token: Option<Py<PyAny>>,
}

impl State {
    fn new(name: String) -> Self {
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

/// A span of fastctl's own, current in its reconcile's task through OpenTelemetry's API
/// (it is registered as a `opentelemetry.trace.Span`): what user code may do to the current
/// span it does here, and fastctl's hooks call the few methods of its own below.
#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct OtlpSpan {
    source: Py<SpanSource>,
    trace_id: u128,
    span_id: u64,
    parent: Option<u64>,
    kind: u32,
    flags: u8,
    start: u64,
    recording: bool,
    state: Mutex<State>,
    context: PyOnceLock<Py<PyAny>>,
    run: Option<Run>,
}

impl OtlpSpan {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn put(&self, key: String, value: Val) {
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

    fn status(&self, code: u32, message: Option<String>) {
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
    fn finish(&self, py: Python<'_>, end: Option<u64>) -> PyResult<()> {
        let end = end.unwrap_or_else(now_ns);
        // What the span holds is taken out under the lock and written after it: writing
        // may run Python code (a value's or an event's attributes read), which may let
        // another thread run and call this span; it must not find the lock held.
        let state = {
            let mut state = self.lock();
            if state.ended {
                return Ok(());
            }
            let mut done = State::new(state.name.clone());
            done.ended = true;
            done.token = state.token.take(); // the run's context is left by the applier
            if !self.recording {
                *state = done;
                return Ok(());
            }
            std::mem::replace(&mut *state, done)
        };
        if let Some(to) = self.source.get().retired.get(py) {
            let record = self.record(py, &state, end)?;
            to.call1(py, (record,))?;
            return Ok(());
        }
        if self.flags & SAMPLED == 0 {
            return Ok(());
        }
        let mut w = Writer::with_capacity(512);
        self.write(py, &mut w, &state, end)?;
        let source = self.source.get();
        let waiting = source.buffer.get().push(w.as_bytes());
        if waiting == source.batch {
            source.wake.call0(py)?;
        }
        Ok(())
    }

    /// ``(name, trace_id, span_id, flags, parent_span_id, kind, start, end, attributes,
    /// events, links, status_code, status_message)``: what the SDK's `ReadableSpan` is
    /// built from (`fastctl._otel_spans.SpanMaker`), for a source retired.
    fn record<'py>(
        &self,
        py: Python<'py>,
        state: &State,
        end: u64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let attrs = PyDict::new(py);
        for (key, value) in &state.attrs {
            match value {
                Val::Str(s) => attrs.set_item(key, s)?,
                Val::Bool(b) => attrs.set_item(key, *b)?,
                Val::Int(i) => attrs.set_item(key, *i)?,
                Val::Double(d) => attrs.set_item(key, *d)?,
                Val::Py(obj) => attrs.set_item(key, obj.bind(py))?,
            }
        }
        let events = PyList::new(py, state.events.iter().map(|e| e.bind(py)))?;
        let links = PyList::new(py, state.links.iter().map(|l| l.bind(py)))?;
        let items: Vec<Bound<'py, PyAny>> = vec![
            state.name.as_str().into_pyobject(py)?.into_any(),
            self.trace_id.into_pyobject(py)?.into_any(),
            self.span_id.into_pyobject(py)?.into_any(),
            self.flags.into_pyobject(py)?.into_any(),
            self.parent.into_pyobject(py)?.into_any(),
            self.kind.into_pyobject(py)?.into_any(),
            self.start.into_pyobject(py)?.into_any(),
            end.into_pyobject(py)?.into_any(),
            attrs.into_any(),
            events.into_any(),
            links.into_any(),
            state.code.into_pyobject(py)?.into_any(),
            state.message.as_deref().into_pyobject(py)?.into_any(),
        ];
        PyTuple::new(py, items)
    }

    fn write(&self, py: Python<'_>, w: &mut Writer, state: &State, end: u64) -> PyResult<()> {
        let open = w.begin(field::SCOPE_SPANS_SPANS);
        w.trace_id(field::SPAN_TRACE_ID, self.trace_id);
        w.span_id(field::SPAN_SPAN_ID, self.span_id);
        if let Some(parent) = self.parent {
            w.span_id(field::SPAN_PARENT_SPAN_ID, parent);
        }
        w.str(field::SPAN_NAME, &state.name);
        w.uint(field::SPAN_KIND, u64::from(self.kind));
        w.fixed64(field::SPAN_START, self.start);
        w.fixed64(field::SPAN_END, end);
        for (key, value) in &state.attrs {
            let mark = w.mark();
            if let Val::Str(s) = value {
                w.string_attribute(field::SPAN_ATTRIBUTES, key, s);
                continue;
            }
            let kv = w.begin(field::SPAN_ATTRIBUTES);
            w.str(field::KEY_VALUE_KEY, key);
            let any = w.begin(field::KEY_VALUE_VALUE);
            match value {
                Val::Bool(b) => w.bool_always(field::ANY_BOOL, *b),
                Val::Int(i) => w.int64_always(field::ANY_INT, *i),
                Val::Double(d) => w.double_always(field::ANY_DOUBLE, *d),
                Val::Str(_) => {}
                Val::Py(obj) => {
                    // `any_value` writes its own AnyValue: undo this one's start.
                    drop(any);
                    w.truncate(mark);
                    let kv = w.begin(field::SPAN_ATTRIBUTES);
                    w.str(field::KEY_VALUE_KEY, key);
                    if any_value(w, field::KEY_VALUE_VALUE, obj.bind(py)).is_err() {
                        w.truncate(mark);
                        continue;
                    }
                    w.end(kv);
                    continue;
                }
            }
            w.end(any);
            w.end(kv);
        }
        for event in &state.events {
            write_event(w, event.bind(py))?;
        }
        for link in &state.links {
            let link = link.bind(py);
            match link.cast_exact::<PyTuple>() {
                Ok(tuple) if tuple.len() == 7 => event_link(w, tuple)?,
                _ => write_link(w, link)?,
            }
        }
        let status = w.begin(field::SPAN_STATUS);
        if let Some(message) = &state.message {
            w.str(field::STATUS_MESSAGE, message);
        }
        w.uint(field::STATUS_CODE, u64::from(state.code));
        w.end(status);
        w.fixed32(field::SPAN_FLAGS, span_flags(false));
        w.end(open);
        Ok(())
    }

    /// Makes this span current in the caller's context (a reconcile's task).
    fn enter_context(&self, slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let source = self.source.get();
        let var = source.var.bind(py);
        let current = var.call_method0(intern!(py, "get"))?;
        let context = source.context_cls.bind(py).call0()?;
        let dict = context.cast::<PyDict>()?; // a dict, read-only by its own methods only
        if let Ok(given) = current.cast::<PyDict>() {
            for (k, v) in given.iter() {
                dict.set_item(k, v)?;
            }
        }
        dict.set_item(source.span_key.bind(py), slf)?;
        let token = var.call_method1(intern!(py, "set"), (context,))?;
        self.lock().token = Some(token.unbind());
        Ok(())
    }

    fn leave_context(&self, py: Python<'_>) {
        let token = self.lock().token.take();
        if let Some(token) = token {
            let var = self.source.get().var.bind(py);
            // In another context (it cannot be: `enter` ran in this task) it is left.
            let _ = var.call_method1(intern!(py, "reset"), (token,));
        }
    }
}

/// A `fastctl._otel.EventLink` tuple, ``(trace_id, span_id, kind, reason, object,
/// resource_version, deleted)``, as the `Link` `fastctl._otel.plain_link` stands for.
fn event_link(w: &mut Writer, link: &Bound<'_, PyTuple>) -> PyResult<()> {
    let open = w.begin(field::SPAN_LINKS);
    w.trace_id(field::LINK_TRACE_ID, link.get_item(0)?.extract()?);
    w.span_id(field::LINK_SPAN_ID, link.get_item(1)?.extract()?);
    let reason = link.get_item(3)?;
    let reason = reason.cast::<PyString>()?.to_str()?;
    w.string_attribute(field::LINK_ATTRIBUTES, "fastctl.trigger.reason", reason);
    if reason != "own_change" {
        let kind = link.get_item(2)?;
        let kind = kind.cast::<PyString>()?.to_str()?;
        w.string_attribute(field::LINK_ATTRIBUTES, "fastctl.watch.kind", kind);
        let named = link.get_item(4)?;
        if !named.is_none() {
            let named = named.cast::<PyString>()?.to_str()?;
            w.string_attribute(field::LINK_ATTRIBUTES, "fastctl.watch.object", named);
        }
    }
    let version = link.get_item(5)?;
    if !version.is_none() {
        let version = version.cast::<PyString>()?.to_str()?;
        w.string_attribute(field::LINK_ATTRIBUTES, "k8s.resource_version", version);
    }
    if link.get_item(6)?.is_truthy()? {
        let kv = w.begin(field::LINK_ATTRIBUTES);
        w.str(field::KEY_VALUE_KEY, "fastctl.watch.deleted");
        let any = w.begin(field::KEY_VALUE_VALUE);
        w.bool_always(field::ANY_BOOL, true);
        w.end(any);
        w.end(kv);
    }
    w.uint(field::LINK_DROPPED_ATTRIBUTES, 0);
    w.fixed32(field::LINK_FLAGS, span_flags(false));
    w.end(open);
    Ok(())
}

/// A request's span name in Kubernetes terms (`fastctl._otel._request_name`).
fn request_name(method: &str, path: &str) -> String {
    let bare = path.split('?').next().unwrap_or("");
    let parts: Vec<&str> = bare.trim_matches('/').split('/').collect();
    let rest: &[&str] = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or(&[]),
        Some(&"apis") => parts.get(3..).unwrap_or(&[]),
        _ => return format!("{method} {path}"),
    };
    let rest = if rest.len() >= 3 && rest[0] == "namespaces" {
        &rest[2..]
    } else {
        rest
    };
    if rest.is_empty() {
        return format!("{method} {path}");
    }
    let named = rest.len() > 1;
    let verb = match method {
        "GET" => (if named { "get" } else { "list" }).to_owned(),
        "DELETE" => (if named { "delete" } else { "deletecollection" }).to_owned(),
        "POST" => "create".to_owned(),
        "PUT" => "update".to_owned(),
        "PATCH" => "patch".to_owned(),
        other => other.to_lowercase(),
    };
    if rest.len() > 2 {
        format!("{verb} {}/{}", rest[0], rest[2])
    } else {
        format!("{verb} {}", rest[0])
    }
}

#[pymethods]
impl OtlpSpan {
    // -- fastctl's hooks -------------------------------------------------------------------

    /// A client span for one API request made beneath this span.
    fn request(slf: &Bound<'_, Self>, method: String, path: String) -> PyResult<OtlpSpan> {
        let this = slf.get();
        let source_obj = this.source.bind(slf.py());
        let source = source_obj.get();
        let place = if this.flags & SAMPLED != 0 { 1 } else { 2 };
        let decision = source.decide[place].of(this.trace_id);
        let mut state = State::new(request_name(&method, &path));
        if decision != 0 {
            state
                .attrs
                .push(("http.request.method".into(), Val::Str(method)));
            state.attrs.push(("url.path".into(), Val::Str(path)));
        }
        source.span(
            source_obj,
            this.trace_id,
            Some(this.span_id),
            KIND_CLIENT,
            decision,
            state,
            None,
        )
    }

    /// The request's answer came: its status code; the span ends.
    fn answered(&self, py: Python<'_>, code: i64) -> PyResult<()> {
        self.put("http.response.status_code".into(), Val::Int(code));
        if code >= 400 {
            self.put("error.type".into(), Val::Str(code.to_string()));
            self.status(STATUS_ERROR, Some(code.to_string()));
        }
        self.finish(py, None)
    }

    /// No answer came: `error`; the span ends.
    fn failed(&self, py: Python<'_>, error: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = error.get_type().name()?.to_string();
        let helpers = self.source.get().helpers.bind(py);
        let text: String = helpers
            .call_method1(intern!(py, "failure_text"), (error,))?
            .extract()?;
        self.put("error.type".into(), Val::Str(name));
        self.status(STATUS_ERROR, Some(text));
        self.finish(py, None)
    }

    /// The request is sent again.
    fn retried(&self) {
        let count = {
            let state = self.lock();
            state
                .attrs
                .iter()
                .find(|(k, _)| k == "http.request.resend_count")
                .map_or(0, |(_, v)| if let Val::Int(i) = v { *i } else { 0 })
        };
        self.put("http.request.resend_count".into(), Val::Int(count + 1));
    }

    /// A reconcile's span becomes current in its task (the requests it makes are its
    /// children, and user code finds it through OpenTelemetry's API).
    fn enter(slf: &Bound<'_, Self>) -> PyResult<()> {
        slf.get().enter_context(slf)
    }

    /// The applier cancelled the run.
    fn cancelled(&self, py: Python<'_>) -> PyResult<()> {
        self.leave_context(py);
        if self.lock().ended {
            return Ok(());
        }
        let outcome = Val::Str("cancelled".into());
        self.put("fastctl.reconcile.outcome".into(), outcome);
        self.status(STATUS_ERROR, Some("cancelled".into()));
        self.finish(py, None)
    }

    /// Two calls in one: OpenTelemetry's ``end(end_time=None)``, and, with `again` given
    /// (the applier's call, ``end(error, action, ended, again=...)``), the end of a run
    /// with its outcome (the common one, done, here; the others in `fastctl._otel_fast`).
    #[pyo3(signature = (end_time=None, action=None, ended=None, *, again=None))]
    fn end(
        slf: &Bound<'_, Self>,
        end_time: Option<Bound<'_, PyAny>>,
        action: Option<Bound<'_, PyAny>>,
        ended: Option<Bound<'_, PyAny>>,
        again: Option<bool>,
    ) -> PyResult<()> {
        let py = slf.py();
        let this = slf.get();
        let Some(again) = again else {
            let end = match end_time {
                Some(t) if !t.is_none() => Some(t.extract::<u64>()?),
                _ => None,
            };
            return this.finish(py, end);
        };
        this.leave_context(py);
        if this.lock().ended {
            return Ok(());
        }
        let error = end_time.filter(|e| !e.is_none());
        let requeue = match &action {
            Some(a) if !a.is_none() => !a.getattr(intern!(py, "requeue_after"))?.is_none(),
            _ => false,
        };
        if error.is_none() && !requeue {
            let outcome = Val::Str("done".into());
            this.put("fastctl.reconcile.outcome".into(), outcome);
            return this.finish(py, None);
        }
        let Some(run) = &this.run else {
            return this.finish(py, None);
        };
        let helpers = this.source.get().helpers.bind(py);
        let args = (
            slf,
            run.owner.bind(py),
            run.scheduler.bind(py),
            run.key.as_str(),
            run.priority,
            error,
            action,
            ended,
            again,
        );
        helpers.call_method1(intern!(py, "end_run"), args)?;
        Ok(())
    }

    /// The current trace and span ids in hex, for a log record.
    fn hex_ids(&self) -> (String, String) {
        (
            format!("{:032x}", self.trace_id),
            format!("{:016x}", self.span_id),
        )
    }

    // -- OpenTelemetry's span API ----------------------------------------------------------

    fn get_span_context(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let made = self
            .context
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                let helpers = self.source.get().helpers.bind(py);
                let args = (self.trace_id, self.span_id, self.flags);
                Ok(helpers.call_method1(intern!(py, "context"), args)?.unbind())
            })?;
        Ok(made.clone_ref(py))
    }

    fn is_recording(&self) -> bool {
        self.recording && !self.lock().ended
    }

    fn set_attribute(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if !self.recording {
            return Ok(());
        }
        let Ok(key) = key.cast_exact::<PyString>() else {
            return Ok(()); // the SDK logs and ignores it
        };
        let key = key.to_str()?;
        if key.is_empty() {
            return Ok(());
        }
        let val = match val_of(value)? {
            Some(v) => v,
            None => {
                let helpers = self.source.get().helpers.bind(py);
                let checked = helpers.call_method1(intern!(py, "checked"), (key, value))?;
                if checked.is_none() {
                    return Ok(()); // not a valid value (the SDK's warning was logged)
                }
                let checked = checked.cast::<PyTuple>()?.get_item(0)?;
                match val_of(&checked)? {
                    Some(v) => v,
                    None => Val::Py(checked.unbind()),
                }
            }
        };
        self.put(key.to_owned(), val);
        Ok(())
    }

    fn set_attributes(&self, py: Python<'_>, attributes: &Bound<'_, PyAny>) -> PyResult<()> {
        for item in attributes.call_method0(intern!(py, "items"))?.try_iter()? {
            let item = item?;
            let pair = item.cast::<PyTuple>()?;
            self.set_attribute(py, &pair.get_item(0)?, &pair.get_item(1)?)?;
        }
        Ok(())
    }

    #[pyo3(signature = (name, attributes=None, timestamp=None))]
    fn add_event(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
    ) -> PyResult<()> {
        if !self.is_recording() {
            return Ok(());
        }
        if let Some(max) = self.source.get().max_events {
            if self.lock().events.len() >= max {
                return Ok(());
            }
        }
        let helpers = self.source.get().helpers.bind(py);
        let stamp = timestamp.filter(|t| *t != 0).unwrap_or_else(now_ns);
        let event = helpers.call_method1(intern!(py, "event"), (name, attributes, stamp))?;
        self.lock().events.push(event.unbind());
        Ok(())
    }

    #[pyo3(signature = (context, attributes=None))]
    fn add_link(
        &self,
        py: Python<'_>,
        context: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        if !self.is_recording() || context.is_none() {
            return Ok(());
        }
        if let Some(max) = self.source.get().max_links {
            if self.lock().links.len() >= max {
                return Ok(());
            }
        }
        let helpers = self.source.get().helpers.bind(py);
        let link = helpers.call_method1(intern!(py, "link"), (context, attributes))?;
        if !link.is_none() {
            self.lock().links.push(link.unbind());
        }
        Ok(())
    }

    fn update_name(&self, name: String) {
        let mut state = self.lock();
        if !state.ended {
            state.name = name;
        }
    }

    #[pyo3(signature = (status, description=None))]
    fn set_status(
        &self,
        py: Python<'_>,
        status: &Bound<'_, PyAny>,
        description: Option<String>,
    ) -> PyResult<()> {
        let helpers = self.source.get().helpers.bind(py);
        let (code, message): (u32, Option<String>) = helpers
            .call_method1(intern!(py, "status"), (status, description))?
            .extract()?;
        self.status(code, message);
        Ok(())
    }

    #[pyo3(signature = (exception, attributes=None, timestamp=None, escaped=false))]
    fn record_exception(
        &self,
        py: Python<'_>,
        exception: &Bound<'_, PyAny>,
        attributes: Option<&Bound<'_, PyAny>>,
        timestamp: Option<u64>,
        escaped: bool,
    ) -> PyResult<()> {
        let helpers = self.source.get().helpers.bind(py);
        let attrs = helpers.call_method1(
            intern!(py, "exception_attributes"),
            (exception, attributes, escaped),
        )?;
        let name = PyString::new(py, "exception");
        self.add_event(py, name.as_any(), Some(&attrs), timestamp)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _kind: &Bound<'_, PyAny>,
        exc: &Bound<'_, PyAny>,
        _tb: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        if !exc.is_none() && self.is_recording() {
            self.record_exception(py, exc, None, None, true)?;
            let helpers = self.source.get().helpers.bind(py);
            let (code, message): (u32, Option<String>) = helpers
                .call_method1(intern!(py, "exit_status"), (exc,))?
                .extract()?;
            self.status(code, message);
        }
        self.finish(py, None)
    }

    fn __repr__(&self) -> String {
        format!(
            "OtlpSpan(name={:?}, trace_id=0x{:032x}, span_id=0x{:016x})",
            self.lock().name,
            self.trace_id,
            self.span_id
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SpanSource>()?;
    m.add_class::<OtlpSpan>()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_in_kubernetes_terms() {
        let path = "/apis/g/v1/namespaces/ns/widgets/w/status";
        assert_eq!(request_name("PATCH", path), "patch widgets/status");
        assert_eq!(
            request_name("GET", "/api/v1/namespaces/ns/configmaps"),
            "list configmaps"
        );
        assert_eq!(
            request_name("GET", "/api/v1/namespaces/ns/configmaps/c"),
            "get configmaps"
        );
        assert_eq!(
            request_name("DELETE", "/api/v1/nodes"),
            "deletecollection nodes"
        );
        assert_eq!(
            request_name("POST", "/api/v1/namespaces/ns/pods?x=1"),
            "create pods"
        );
        assert_eq!(request_name("GET", "/version"), "GET /version");
        assert_eq!(request_name("GET", "/api/v1"), "GET /api/v1");
    }

    #[test]
    fn ratio_decides_on_the_low_64_bits() {
        assert_eq!(Decide::Ratio(10).of(u128::from(u64::MAX) << 64 | 9), 2);
        assert_eq!(Decide::Ratio(10).of(10), 0);
        assert_eq!(Decide::Fixed(1).of(0), 1);
    }
}
