//! The native core of swa-es.
//!
//! Every per-event loop of the project lives here: sglang-compatible page-chain hashing, the
//! state digest, the batch codec, the replica block store and prefix matching. The pure-Rust
//! modules know nothing of Python; `py` (behind the `python` feature) is the thin PyO3 layer
//! that the Python package `cache.events` wraps in a typed face. Each piece has a pure-Python
//! twin in `tests/oracles/`, the readable reference that differential tests hold equal.

pub mod codec;
pub mod digest;
pub mod event_types;
pub mod events;
pub mod hashing;
pub mod recorder;
pub mod replica;

#[cfg(feature = "python")]
mod py;
