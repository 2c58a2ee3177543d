//! fastctl's core: the keyed priority/delay scheduler (`scheduler`), the watch-frame
//! decoder (`frames`, and `proto` for protobuf frames of ConfigMaps and Secrets), the
//! compact object cache (`cache`), the OTLP trace writer (`otlp`) and the read-your-writes
//! guard's state (`written`), the lean transport's TLS (`tls`, rustls) and HTTP/1.1 framing (`http1`, with
//! `unframe`, the chunked decoder it shares with `stream`), all plain Rust, and
//! their thin Python binding (`binding`, `frames_binding`, `cache_binding`, `otlp_binding`,
//! `written_binding`, `tls_binding`, `http1_binding`), built by maturin into
//! `fastctl._core`.

mod binding;
pub mod cache;
mod cache_binding;
mod clock;
pub mod frames;
mod frames_binding;
pub mod http1;
mod http1_binding;
pub mod otlp;
mod otlp_binding;
mod otlp_http;
mod otlp_span;
pub mod proto;
pub mod scheduler;
pub mod stream;
mod stream_binding;
pub mod tls;
mod tls_binding;
pub mod unframe;
pub mod written;
mod written_binding;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<binding::PyScheduler>()?;
    crate::frames_binding::register(m)?;
    crate::cache_binding::register(m)?;
    crate::otlp_binding::register(m)?;
    crate::otlp_span::register(m)?;
    crate::otlp_http::register(m)?;
    crate::written_binding::register(m)?;
    crate::stream_binding::register(m)?;
    crate::tls_binding::register(m)?;
    crate::http1_binding::register(m)?;
    m.add("MAX_DELAY", scheduler::MAX_DELAY)?;
    m.add("SCHEDULER_DEFAULTS", binding::scheduler_defaults(m.py())?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
