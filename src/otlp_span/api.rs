//! `OtlpSpan`'s Python methods: fastctl's hooks (a request's span, its answer, a run's
//! entry and end) and OpenTelemetry's span API, for user code that reads the current span.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use super::state::{val_of, OtlpSpan, State, Text, Val, SAMPLED, STATUS_ERROR};
use super::wire::request_name;
use super::{now_ns, KIND_CLIENT};

#[pymethods]
impl OtlpSpan {
    // -- fastctl's hooks -------------------------------------------------------------------

    /// A client span for one API request made beneath this span: its method and path
    /// kept as the Python strings they are.
    fn request(
        slf: &Bound<'_, Self>,
        method: Bound<'_, PyString>,
        path: Bound<'_, PyString>,
    ) -> PyResult<OtlpSpan> {
        let this = slf.get();
        let source_obj = this.source.bind(slf.py());
        let source = source_obj.get();
        let place = if this.flags & SAMPLED != 0 { 1 } else { 2 };
        let decision = source.decide[place].of(this.trace_id);
        let name = request_name(method.to_str()?, path.to_str()?);
        let mut state = State::new(Text::Owned(name));
        if decision != 0 {
            let method = Val::Str(Text::Py(method.unbind()));
            state.attrs.push(("http.request.method".into(), method));
            let path = Val::Str(Text::Py(path.unbind()));
            state.attrs.push(("url.path".into(), path));
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
            self.put("error.type".into(), Val::Str(Text::Owned(code.to_string())));
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
        self.put("error.type".into(), Val::Str(Text::Owned(name)));
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
        let outcome = Val::Str(Text::Static("cancelled"));
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
            let outcome = Val::Str(Text::Static("done"));
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
            run.key.bind(py),
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
        self.put(key.to_owned().into(), val);
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
            state.name = Text::Owned(name);
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

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let name = self.lock().name.clone_ref(py);
        Ok(format!(
            "OtlpSpan(name={:?}, trace_id=0x{:032x}, span_id=0x{:016x})",
            name.get(py)?,
            self.trace_id,
            self.span_id
        ))
    }
}
