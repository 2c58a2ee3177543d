//! fastctl's core: the keyed priority/delay scheduler (`scheduler`), the watch-frame
//! decoder (`frames`, and `proto` for protobuf frames of ConfigMaps and Secrets), the
//! compact object cache (`cache`), the OTLP trace writer (`otlp`) and the read-your-writes
//! guard's state (`written`), the lean transport's TLS (`tls`, rustls), all plain Rust, and
//! their thin Python binding (`binding`, `cache_binding`, `otlp_binding`, `written_binding`,
//! `tls_binding`), built by maturin into
//! `fastctl._core`.

mod binding;
pub mod cache;
mod cache_binding;
mod clock;
pub mod frames;
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
pub mod written;
mod written_binding;
