//! An `OtlpSpan` written when it ends: as an OTLP `Span` (protobuf) into its buffer, or
//! as a record for the SDK's processors (a source retired); a request's span name.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use super::state::{OtlpSpan, State, Val};
use crate::otlp::{field, span_flags, Writer};
use crate::otlp_binding::{any_value, write_event, write_link};

impl OtlpSpan {
    /// ``(name, trace_id, span_id, flags, parent_span_id, kind, start, end, attributes,
    /// events, links, status_code, status_message)``: what the SDK's `ReadableSpan` is
    /// built from (`fastctl._otel_spans.SpanMaker`), for a source retired.
    pub(super) fn record<'py>(
        &self,
        py: Python<'py>,
        state: &State,
        end: u64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let attrs = PyDict::new(py);
        for (key, value) in &state.attrs {
            match value {
                Val::Str(s) => attrs.set_item(key.as_ref(), s.to_py(py))?,
                Val::Bool(b) => attrs.set_item(key.as_ref(), *b)?,
                Val::Int(i) => attrs.set_item(key.as_ref(), *i)?,
                Val::Double(d) => attrs.set_item(key.as_ref(), *d)?,
                Val::Py(obj) => attrs.set_item(key.as_ref(), obj.bind(py))?,
            }
        }
        let events = PyList::new(py, state.events.iter().map(|e| e.bind(py)))?;
        let links = PyList::new(py, state.links.iter().map(|l| l.bind(py)))?;
        let items: Vec<Bound<'py, PyAny>> = vec![
            state.name.to_py(py),
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

    pub(super) fn write(
        &self,
        py: Python<'_>,
        w: &mut Writer,
        state: &State,
        end: u64,
    ) -> PyResult<()> {
        let open = w.begin(field::SCOPE_SPANS_SPANS);
        w.trace_id(field::SPAN_TRACE_ID, self.trace_id);
        w.span_id(field::SPAN_SPAN_ID, self.span_id);
        if let Some(parent) = self.parent {
            w.span_id(field::SPAN_PARENT_SPAN_ID, parent);
        }
        w.str(field::SPAN_NAME, state.name.get(py)?);
        w.uint(field::SPAN_KIND, u64::from(self.kind));
        w.fixed64(field::SPAN_START, self.start);
        w.fixed64(field::SPAN_END, end);
        for (key, value) in &state.attrs {
            let mark = w.mark();
            if let Val::Str(s) = value {
                w.string_attribute(field::SPAN_ATTRIBUTES, key, s.get(py)?);
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
pub(super) fn request_name(method: &str, path: &str) -> String {
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
}
