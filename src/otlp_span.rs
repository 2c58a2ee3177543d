//! `OtlpSpan`: a span of fastctl's own (a reconcile's, a request's) kept in Rust from its
//! start to its end, and written as an OTLP `Span` into its `SpanBuffer` when it ends, for
//! the export `fastctl._otlp.OtlpExport` (what `fastctl run --tracing` builds). Made by a
//! `SpanSource` (one per buffer), which draws the ids and asks the standard sampler's
//! decision itself; a controller's reconcile spans by its `ReconcileSpans`, which holds
//! what is the same for all of them (the span's name, the controller's, the run's owner
//! and scheduler), so a reconcile's start passes only what is its own. The rare paths (an
//! event, a status, a value that is not a scalar) call back into `fastctl._otel_fast`.
//!
//! The modules: `state` (what a span holds, its end, its context), `wire` (its OTLP form
//! and its record for the SDK), `api` (its Python methods).

mod api;
mod state;
mod wire;

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyString, PyTuple};

use crate::otlp_binding::SpanBuffer;
pub(crate) use state::OtlpSpan;
use state::{val_of, Decide, Run, State, Text, Val};

const KIND_INTERNAL: u32 = 1;
const KIND_CLIENT: u32 = 3;

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
    /// OTel's context variable's `get`, `set` and `reset`, bound once.
    var_get: Py<PyAny>,
    var_set: Py<PyAny>,
    var_reset: Py<PyAny>,
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
        py: Python<'_>,
        buffer: Py<SpanBuffer>,
        helpers: Py<PyAny>,
        wake: Py<PyAny>,
        batch: usize,
        decide: [(u8, u64); 3],
        random: u8,
        limits: (Option<usize>, Option<usize>, Option<usize>),
        context: (Bound<'_, PyAny>, Py<PyAny>, Py<PyString>),
        seed: u64,
        ids: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let decide = decide.map(|(k, v)| {
            if k == 0 {
                Decide::Fixed(v as u8)
            } else {
                Decide::Ratio(v)
            }
        });
        let var = &context.0;
        Ok(Self {
            buffer,
            helpers,
            wake,
            batch,
            decide,
            random,
            max_attributes: limits.0,
            max_events: limits.1,
            max_links: limits.2,
            var_get: var.getattr(intern!(py, "get"))?.unbind(),
            var_set: var.getattr(intern!(py, "set"))?.unbind(),
            var_reset: var.getattr(intern!(py, "reset"))?.unbind(),
            context_cls: context.1,
            span_key: context.2,
            rng: AtomicU64::new(seed),
            pid: AtomicU32::new(std::process::id()),
            retired: PyOnceLock::new(),
            ids,
        })
    }

    /// The provider's processors changed: the spans of this source that end from now on
    /// go to `to` (a record each, `OtlpSpan`'s `record`), not into the buffer.
    fn retire(&self, py: Python<'_>, to: Py<PyAny>) {
        let _ = self.retired.set(py, to);
    }

    /// The maker of one controller run's reconcile spans: `name` is the spans' name,
    /// `controller` the controller's, `owner` its tracing and `scheduler` its scheduler
    /// (what `end` hands `fastctl._otel_fast.end_run` for an outcome other than done).
    fn reconciles(
        slf: &Bound<'_, Self>,
        name: Bound<'_, PyString>,
        controller: Bound<'_, PyString>,
        owner: Py<PyAny>,
        scheduler: Py<PyAny>,
    ) -> PyResult<ReconcileSpans> {
        name.to_str()?; // refused here, not at each span's end, if not UTF-8
        controller.to_str()?;
        Ok(ReconcileSpans {
            source: slf.clone().unbind(),
            name: name.unbind(),
            controller: controller.unbind(),
            owner,
            scheduler,
        })
    }
}

/// Makes one controller run's reconcile spans (`SpanSource.reconciles`).
#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct ReconcileSpans {
    source: Py<SpanSource>,
    name: Py<PyString>,
    controller: Py<PyString>,
    owner: Py<PyAny>,
    scheduler: Py<PyAny>,
}

#[pymethods]
impl ReconcileSpans {
    /// The span of `key`'s run, a root, started now: its attempt and fair group (None:
    /// none), and what its triggers left pending, ``(links, since, priority, dropped)``
    /// (`fastctl._otel._Pending`) or None; `now` on the clock of `since` (its queue wait).
    /// The links are `fastctl._otel.EventLink` tuples or the SDK's `Link`s, one as it is
    /// or a list.
    fn start(
        &self,
        py: Python<'_>,
        key: Bound<'_, PyString>,
        attempt: i64,
        group: Option<Bound<'_, PyAny>>,
        pending: Option<Bound<'_, PyTuple>>,
        now: f64,
    ) -> PyResult<OtlpSpan> {
        key.to_str()?;
        let source_obj = self.source.bind(py);
        let source = source_obj.get();
        let trace_id = source.trace_id(py)?;
        let decision = source.decide[0].of(trace_id);
        let mut state = State::new(Text::Py(self.name.clone_ref(py)));
        let (links, priority) = match &pending {
            Some(p) => (Some(p.get_item(0)?), p.get_item(2)?.extract::<i64>()?),
            None => (None, 0),
        };
        if decision != 0 {
            let attrs = &mut state.attrs;
            let controller = Val::Str(Text::Py(self.controller.clone_ref(py)));
            attrs.push(("fastctl.controller".into(), controller));
            let object = Val::Str(Text::Py(key.clone().unbind()));
            attrs.push(("fastctl.object".into(), object));
            attrs.push(("fastctl.reconcile.attempt".into(), Val::Int(attempt)));
            if let Some(p) = &pending {
                let wait = (now - p.get_item(1)?.extract::<f64>()?).max(0.0);
                attrs.push(("fastctl.reconcile.queue_wait".into(), Val::Double(wait)));
                let dropped = p.get_item(3)?.extract::<i64>()?;
                if dropped != 0 {
                    let dropped = Val::Int(dropped);
                    attrs.push(("fastctl.reconcile.links_dropped".into(), dropped));
                }
            }
            attrs.push(("fastctl.reconcile.priority".into(), Val::Int(priority)));
            if let Some(group) = group {
                let value = val_of(&group)?.unwrap_or_else(|| Val::Py(group.unbind()));
                attrs.push(("fastctl.reconcile.fair_group".into(), value));
            }
            if let Some(links) = links.filter(|l| !l.is_none()) {
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
            owner: self.owner.clone_ref(py),
            scheduler: self.scheduler.clone_ref(py),
            key: key.unbind(),
            priority,
        };
        source.span(
            source_obj,
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
        let sampled = if decision == 2 { state::SAMPLED } else { 0 };
        Ok(OtlpSpan {
            source: slf.clone().unbind(),
            trace_id,
            span_id: self.span_id(slf.py())?,
            parent,
            kind,
            flags: sampled | self.random,
            start: now_ns(),
            recording: decision != 0,
            state: std::sync::Mutex::new(state),
            context: PyOnceLock::new(),
            run,
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SpanSource>()?;
    m.add_class::<ReconcileSpans>()?;
    m.add_class::<OtlpSpan>()?;
    Ok(())
}
