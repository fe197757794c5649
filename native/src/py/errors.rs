//! The core's errors as Python exceptions, in one place. The core words each error once (its
//! `Display`); here each becomes the exception `cache.events` defines for it:
//!
//! - `codec::Error` while decoding: `DecodeError(field, reason)`;
//! - `codec::Error` while encoding: `ValueError("field: reason")`;
//! - `recorder::Error`: `EventRecorderError(reason)`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::classes::classes;
use crate::{codec, recorder};

/// The Python `cache.events.DecodeError` of a record (or meta, or event) that does not decode.
pub(super) fn decode_error(py: Python<'_>, error: codec::Error) -> PyErr {
    let reason = error.reason.to_string();
    match classes(py).and_then(|c| c.decode_error.bind(py).call1((error.field, reason))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(lookup_failed) => lookup_failed,
    }
}

/// The `ValueError` of a batch that would not decode again.
pub(super) fn encode_error(error: codec::Error) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// The Python `cache.events.recorder.EventRecorderError` of a recorder failure.
pub(super) fn recorder_error(py: Python<'_>, error: recorder::Error) -> PyErr {
    match classes(py).and_then(|c| c.recorder_error.bind(py).call1((error.to_string(),))) {
        Ok(instance) => PyErr::from_value(instance),
        Err(lookup_failed) => lookup_failed,
    }
}
