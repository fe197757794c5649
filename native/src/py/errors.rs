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
use pyo3::types::PyType;
use pyo3::PyErrArguments;

use super::classes::{classes, Classes};
use crate::replica::{ConsistencyError, SnapshotError};
use crate::{codec, recorder};

/// An instance of the class `class` picks from the bound ones, made from `arguments` when it is
/// raised; the error that the classes are not bound otherwise.
fn bound_error<A>(
    py: Python<'_>,
    class: impl FnOnce(&Classes) -> &Py<PyType>,
    arguments: A,
) -> PyErr
where
    A: PyErrArguments + Send + Sync + 'static,
{
    match classes(py) {
        Ok(classes) => PyErr::from_type(class(classes).bind(py).clone(), arguments),
        Err(unbound) => unbound,
    }
}

/// The Python `cache.events.DecodeError` of a record (or meta, or event) that does not decode.
pub(super) fn decode_error(py: Python<'_>, error: codec::Error) -> PyErr {
    let reason = error.reason.to_string();
    bound_error(py, |c| &c.decode_error, (error.field, reason))
}

/// The `ValueError` of a batch that would not decode again.
pub(super) fn encode_error(error: codec::Error) -> PyErr {
    PyValueError::new_err(error.to_string())
}

/// The Python `cache.events.recorder.EventRecorderError` of a recorder failure.
pub(super) fn recorder_error(py: Python<'_>, error: recorder::Error) -> PyErr {
    bound_error(py, |c| &c.recorder_error, (error.to_string(),))
}

/// The arguments of `ReplicaConsistencyError`: the source and the reason worded.
pub(super) fn consistency_parts(error: ConsistencyError) -> (String, String) {
    let reason = error.reason.to_string();
    (error.source, reason)
}

/// The Python `cache.events.replica_store.ReplicaConsistencyError` of an event that does not
/// fit a source's replica.
pub(super) fn consistency_error(py: Python<'_>, error: ConsistencyError) -> PyErr {
    bound_error(py, |c| &c.consistency_error, consistency_parts(error))
}

/// The Python `cache.events.replica_store.ReplicaSnapshotError` of bytes that are not a
/// snapshot.
pub(super) fn snapshot_error(py: Python<'_>, error: SnapshotError) -> PyErr {
    bound_error(py, |c| &c.snapshot_error, (error.to_string(),))
}
