//! `otlp_encode`: the span records `fastctl._otlp` keeps, written as one OTLP
//! `ExportTraceServiceRequest` by `otlp::Writer`. Only the walk over Python objects is
//! here; what each record holds is said in `fastctl._otlp`.

use std::collections::VecDeque;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PySequence, PyString, PyTuple,
};

use crate::otlp::{field, span_flags, Writer};

/// Writes `value` as an `AnyValue` in `field`, as the SDK's `_encode_value` does; Err for a
/// value it cannot encode (the caller leaves the attribute out, as the SDK does).
pub(crate) fn any_value(w: &mut Writer, fld: u32, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let open = w.begin(fld);
    if value.is_none() {
    } else if let Ok(b) = value.cast::<PyBool>() {
        w.bool_always(field::ANY_BOOL, b.is_true());
    } else if let Ok(s) = value.cast::<PyString>() {
        w.bytes_always(field::ANY_STRING, s.to_str()?.as_bytes());
    } else if value.is_instance_of::<PyInt>() {
        w.int64_always(field::ANY_INT, value.extract::<i64>()?);
    } else if let Ok(f) = value.cast::<PyFloat>() {
        w.double_always(field::ANY_DOUBLE, f.value());
    } else if let Ok(b) = value.cast::<PyBytes>() {
        w.bytes_always(field::ANY_BYTES, b.as_bytes());
    } else if let Ok(seq) = value.cast::<PySequence>() {
        let array = w.begin(field::ANY_ARRAY);
        for item in seq.try_iter()? {
            any_value(w, field::ARRAY_VALUES, &item?)?;
        }
        w.end(array);
    } else if let Ok(map) = value.cast::<PyMapping>() {
        let list = w.begin(field::ANY_KVLIST);
        for item in map.items()?.iter() {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            key_value(w, field::KVLIST_VALUES, k.str()?.to_str()?, &v)?;
        }
        w.end(list);
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "invalid attribute value type {}",
            value.get_type().name()?
        )));
    }
    w.end(open);
    Ok(())
}

fn key_value(w: &mut Writer, fld: u32, key: &str, value: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(s) = value.cast::<PyString>() {
        w.string_attribute(fld, key, s.to_str()?);
        return Ok(());
    }
    let kv = w.begin(fld);
    w.str(field::KEY_VALUE_KEY, key);
    any_value(w, field::KEY_VALUE_VALUE, value)?;
    w.end(kv);
    Ok(())
}

/// `attributes` (a dict, a mapping or None) as repeated `KeyValue`s in `field`; a value
/// that cannot be encoded is left out, its key with it.
pub(crate) fn attributes(w: &mut Writer, fld: u32, attributes: &Bound<'_, PyAny>) -> PyResult<()> {
    if attributes.is_none() {
        return Ok(());
    }
    let one = |w: &mut Writer, k: Bound<'_, PyAny>, v: Bound<'_, PyAny>| -> PyResult<()> {
        let mark = w.mark();
        let key = k.str()?;
        if key_value(w, fld, key.to_str()?, &v).is_err() {
            w.truncate(mark);
        }
        Ok(())
    };
    if let Ok(dict) = attributes.cast::<PyDict>() {
        for (k, v) in dict.iter() {
            one(w, k, v)?;
        }
    } else {
        for item in attributes.cast::<PyMapping>()?.items()?.iter() {
            let (k, v) = item.extract()?;
            one(w, k, v)?;
        }
    }
    Ok(())
}

fn opt_str<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyString>>> {
    if value.is_none() {
        Ok(None)
    } else {
        Ok(Some(value.cast::<PyString>()?.clone()))
    }
}

fn u64_of(value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_none() {
        Ok(0)
    } else {
        value.extract()
    }
}

/// One span record (a tuple, `fastctl._otlp.SpanRecord`) as a `Span` in `ScopeSpans`.
fn span(w: &mut Writer, record: &Bound<'_, PyTuple>) -> PyResult<()> {
    let item = |i: usize| record.get_item(i);
    let open = w.begin(field::SCOPE_SPANS_SPANS);
    w.trace_id(field::SPAN_TRACE_ID, item(1)?.extract()?);
    w.span_id(field::SPAN_SPAN_ID, item(2)?.extract()?);
    if let Some(state) = opt_str(&item(3)?)? {
        w.str(field::SPAN_TRACE_STATE, state.to_str()?);
    }
    let parent = item(4)?;
    if !parent.is_none() {
        w.span_id(field::SPAN_PARENT_SPAN_ID, parent.extract()?);
    }
    w.str(field::SPAN_NAME, item(0)?.cast::<PyString>()?.to_str()?);
    w.uint(field::SPAN_KIND, item(6)?.extract()?);
    w.fixed64(field::SPAN_START, u64_of(&item(7)?)?);
    w.fixed64(field::SPAN_END, u64_of(&item(8)?)?);
    attributes(w, field::SPAN_ATTRIBUTES, &item(9)?)?;
    w.uint(field::SPAN_DROPPED_ATTRIBUTES, item(14)?.extract()?);
    for event in item(10)?.try_iter()? {
        write_event(w, &event?)?;
    }
    w.uint(field::SPAN_DROPPED_EVENTS, item(15)?.extract()?);
    for link in item(11)?.try_iter()? {
        write_link(w, &link?)?;
    }
    w.uint(field::SPAN_DROPPED_LINKS, item(16)?.extract()?);
    let status = w.begin(field::SPAN_STATUS);
    if let Some(message) = opt_str(&item(13)?)? {
        w.str(field::STATUS_MESSAGE, message.to_str()?);
    }
    w.uint(field::STATUS_CODE, item(12)?.extract()?);
    w.end(status);
    w.fixed32(field::SPAN_FLAGS, span_flags(item(5)?.is_truthy()?));
    w.end(open);
    Ok(())
}

/// One of the SDK's `Event` objects as a span's `Event`.
pub(crate) fn write_event(w: &mut Writer, event: &Bound<'_, PyAny>) -> PyResult<()> {
    let open = w.begin(field::SPAN_EVENTS);
    w.fixed64(field::EVENT_TIME, u64_of(&event.getattr("timestamp")?)?);
    if let Some(name) = opt_str(&event.getattr("name")?)? {
        w.str(field::EVENT_NAME, name.to_str()?);
    }
    attributes(w, field::EVENT_ATTRIBUTES, &event.getattr("attributes")?)?;
    w.uint(
        field::EVENT_DROPPED_ATTRIBUTES,
        event.getattr("dropped_attributes")?.extract()?,
    );
    w.end(open);
    Ok(())
}

/// One link: the SDK's `Link`, or a plain tuple (`plain_link`).
pub(crate) fn write_link(w: &mut Writer, link: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(plain) = link.cast_exact::<PyTuple>() {
        return plain_link(w, plain);
    }
    let context = link.getattr("context")?;
    let context = context.cast::<PyTuple>()?; // a SpanContext is a tuple
    let open = w.begin(field::SPAN_LINKS);
    w.trace_id(field::LINK_TRACE_ID, context.get_item(0)?.extract()?);
    w.span_id(field::LINK_SPAN_ID, context.get_item(1)?.extract()?);
    attributes(w, field::LINK_ATTRIBUTES, &link.getattr("attributes")?)?;
    w.uint(
        field::LINK_DROPPED_ATTRIBUTES,
        link.getattr("dropped_attributes")?.extract()?,
    );
    w.fixed32(
        field::LINK_FLAGS,
        span_flags(context.get_item(2)?.is_truthy()?),
    );
    w.end(open);
    Ok(())
}

/// A link given as a plain tuple, ``(trace_id, span_id, is_remote, attributes)`` (fastctl's
/// own links to watch events: no `SpanContext` or `Link` object is built for them), as the
/// SDK's encoder writes a `Link` to that context with those attributes.
fn plain_link(w: &mut Writer, link: &Bound<'_, PyTuple>) -> PyResult<()> {
    let open = w.begin(field::SPAN_LINKS);
    w.trace_id(field::LINK_TRACE_ID, link.get_item(0)?.extract()?);
    w.span_id(field::LINK_SPAN_ID, link.get_item(1)?.extract()?);
    attributes(w, field::LINK_ATTRIBUTES, &link.get_item(3)?)?;
    w.uint(field::LINK_DROPPED_ATTRIBUTES, 0);
    w.fixed32(
        field::LINK_FLAGS,
        span_flags(link.get_item(2)?.is_truthy()?),
    );
    w.end(open);
    Ok(())
}

/// Writes a request's envelope, one `ResourceSpans` with one `ScopeSpans`, around `spans`
/// (`Span` messages already written in `ScopeSpans.spans`); `header` is ``(resource_attributes,
/// resource_schema_url, scope_name, scope_version, scope_attributes, scope_schema_url)``.
fn group(w: &mut Writer, header: &Bound<'_, PyTuple>, spans: &[u8]) -> PyResult<()> {
    let item = |i: usize| header.get_item(i);
    let resource_spans = w.begin(field::REQUEST_RESOURCE_SPANS);
    let resource = w.begin(field::RESOURCE_SPANS_RESOURCE);
    attributes(w, field::RESOURCE_ATTRIBUTES, &item(0)?)?;
    w.end(resource);
    let scope_spans = w.begin(field::RESOURCE_SPANS_SCOPE_SPANS);
    let scope = w.begin(field::SCOPE_SPANS_SCOPE);
    if let Some(name) = opt_str(&item(2)?)? {
        w.str(field::SCOPE_NAME, name.to_str()?);
    }
    if let Some(version) = opt_str(&item(3)?)? {
        w.str(field::SCOPE_VERSION, version.to_str()?);
    }
    attributes(w, field::SCOPE_ATTRIBUTES, &item(4)?)?;
    w.end(scope);
    w.raw(spans);
    if let Some(url) = opt_str(&item(5)?)? {
        w.str(field::SCOPE_SPANS_SCHEMA_URL, url.to_str()?);
    }
    w.end(scope_spans);
    if let Some(url) = opt_str(&item(1)?)? {
        w.str(field::RESOURCE_SPANS_SCHEMA_URL, url.to_str()?);
    }
    w.end(resource_spans);
    Ok(())
}

/// `groups`: a list of ``(*header, records)`` (`group`'s header, then a list of span
/// records), one `ResourceSpans` each. Returns the serialised `ExportTraceServiceRequest`.
#[pyfunction]
fn otlp_encode<'py>(py: Python<'py>, groups: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyBytes>> {
    let mut w = Writer::with_capacity(4096);
    for item in groups.iter() {
        let item = item.cast::<PyTuple>()?;
        let mut spans = Writer::new();
        for record in item.get_item(6)?.try_iter()? {
            span(&mut spans, record?.cast::<PyTuple>()?)?;
        }
        group(&mut w, &item.get_slice(0, 6), spans.as_bytes())?;
    }
    Ok(PyBytes::new(py, w.as_bytes()))
}

/// The spans of one resource and scope waiting for their export, each written as a `Span`
/// when it ends (`add`): nothing of it stays in Python's heap. `take` hands a batch over as
/// a whole request. Shared between the event loop and the export thread (a mutex).
#[pyclass(frozen, module = "fastctl._core")]
pub(crate) struct SpanBuffer {
    header: Py<PyTuple>,
    max_spans: usize,
    inner: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    spans: Writer,
    /// Where each waiting span ends in `spans`.
    ends: VecDeque<usize>,
    dropped: u64,
    closed: bool,
}

#[pymethods]
impl SpanBuffer {
    #[new]
    fn new(header: Bound<'_, PyTuple>, max_spans: usize) -> Self {
        Self {
            header: header.unbind(),
            max_spans,
            inner: Mutex::new(Held::default()),
        }
    }

    /// Writes one span record (`fastctl._otlp.SpanRecord`); returns how many spans wait
    /// now, 0 when it was dropped (the buffer full or closed). The record is read before
    /// the lock is taken: Python code (an attribute read) may let another thread run, which
    /// must not find the lock held.
    fn add(&self, record: &Bound<'_, PyTuple>) -> PyResult<usize> {
        if self.full() {
            return Ok(0);
        }
        let mut one = Writer::with_capacity(512);
        span(&mut one, record)?;
        let mut held = self.lock();
        if held.closed || held.ends.len() >= self.max_spans {
            held.dropped += 1;
            return Ok(0);
        }
        held.spans.raw(one.as_bytes());
        let end = held.spans.mark();
        held.ends.push_back(end);
        Ok(held.ends.len())
    }

    /// An `ExportTraceServiceRequest` of the first `max` spans waiting (they leave the
    /// buffer) and their count; None when none waits.
    fn take<'py>(
        &self,
        py: Python<'py>,
        max: usize,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, usize)>> {
        let (spans, count) = {
            let mut held = self.lock();
            let count = max.min(held.ends.len());
            if count == 0 {
                return Ok(None);
            }
            let end = held.ends[count - 1];
            let spans = held.spans.as_bytes()[..end].to_vec();
            held.ends.drain(..count);
            for left in held.ends.iter_mut() {
                *left -= end; // offsets into what stays
            }
            held.spans.drain_front(end);
            (spans, count)
        };
        let mut w = Writer::with_capacity(spans.len() + 256);
        group(&mut w, self.header.bind(py), &spans)?;
        Ok(Some((PyBytes::new(py, w.as_bytes()), count)))
    }

    /// Spans dropped: the buffer was full, or closed.
    #[getter]
    fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// Spans waiting.
    fn __len__(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ends
            .len()
    }

    /// Take no more spans (they are dropped and counted).
    fn close(&self) {
        self.lock().closed = true;
    }
}

impl SpanBuffer {
    /// One `Span` message written elsewhere (`fastctl._core.OtlpSpan`'s end); how many
    /// spans wait now, 0 when it was dropped (the buffer full or closed).
    pub(crate) fn push(&self, span: &[u8]) -> usize {
        let mut held = self.lock();
        if held.closed || held.ends.len() >= self.max_spans {
            held.dropped += 1;
            return 0;
        }
        held.spans.raw(span);
        let end = held.spans.mark();
        held.ends.push_back(end);
        held.ends.len()
    }

    /// The buffer's state. No Python code runs while it is held (so a thread switch cannot
    /// leave it held while another thread, holding the GIL, waits for it).
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Full or closed: the span is dropped (and counted) without being written.
    fn full(&self) -> bool {
        let mut held = self.lock();
        if held.closed || held.ends.len() >= self.max_spans {
            held.dropped += 1;
            return true;
        }
        false
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(otlp_encode, m)?)?;
    m.add_class::<SpanBuffer>()?;
    Ok(())
}
