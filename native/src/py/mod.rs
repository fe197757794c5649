//! The PyO3 layer: the private extension module `cache.events._native`.
//!
//! Functions here only convert arguments and results and translate errors; the work is in the
//! pure-Rust modules. The typed Python face is `cache.events`.

use pyo3::prelude::*;

mod answer_rows;
mod classes;
pub(crate) mod codec;
mod digest;
mod errors;
mod event_fields;
mod events_in;
mod hashing;
mod meta;
mod recorder;
mod replay;
mod replica;
mod tokens;

#[pymodule]
#[pyo3(name = "_native")]
fn native_module(module: &Bound<'_, PyModule>) -> PyResult<()> {
    classes::register(module)?;
    hashing::register(module)?;
    digest::register(module)?;
    codec::register(module)?;
    recorder::register(module)?;
    replica::register(module)?;
    replay::register(module)?;
    tokens::register(module)?;
    Ok(())
}
