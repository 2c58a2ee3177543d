//! fastctl's scheduling core: the keyed priority/delay scheduler (`scheduler`, plain Rust)
//! and its thin Python binding (`binding`), built by maturin into `fastctl._core`.

mod binding;
mod clock;
pub mod scheduler;
