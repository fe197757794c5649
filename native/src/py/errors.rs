//! The core's errors as Python exceptions, in one place. The core words each error once (its
//! `Display`); here each becomes the exception `cache.events` defines for it:
//!
//! - `codec::Error` while decoding: `DecodeError(field, reason)`;
//! - `codec::Error` while encoding: `ValueError("field: reason")`;
//! - `recorder::Error`: `EventRecorderError(reason)`;
//! - `replica::ConsistencyError`: `ReplicaConsistencyError(source, reason)`;
//! - `replica::SnapshotError`: `ReplicaSnapshotError(reason)`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::classes::classes;
use crate::replica::{ConsistencyError, SnapshotError};
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

/// The arguments of `ReplicaConsistencyError`: the source and the reason worded.
pub(super) fn consistency_parts(error: ConsistencyError) -> (String, String) {
    let reason = error.reason.to_string();
    (error.source, reason)
}

/// The Python `cache.events.replica_store.ReplicaConsistencyError` of an event that does not
/// fit a source's replica.
pub(super) fn consistency_error(py: Python<'_>, error: ConsistencyError) -> PyErr {
    match classes(py) {
        Ok(classes) => PyErr::from_type(
            classes.consistency_error.bind(py).clone(),
            consistency_parts(error),
        ),
        Err(err) => err,
    }
}

/// The Python `cache.events.replica_store.ReplicaSnapshotError` of bytes that are not a
/// snapshot.
pub(super) fn snapshot_error(py: Python<'_>, error: SnapshotError) -> PyErr {
    match classes(py) {
        Ok(classes) => PyErr::from_type(
            classes.snapshot_error.bind(py).clone(),
            (error.to_string(),),
        ),
        Err(err) => err,
    }
}
