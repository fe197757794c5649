//! Each field kind of `crate::event_types` in Python: the value a Python event holds for it
//! (`to_py`) and the core's value read back from one (`from_py`). The events' own conversions
//! (`super::events_in`, `super::codec`) are derived from the table of event types through these.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyString, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::event_types::kind;
use crate::events::{FieldKind, Hashes, Medium, RemovalReason, Tokens};

/// A field kind's conversions. `path` names the field (`events[i].field`) in a ValueError.
pub(crate) trait PyField: FieldKind {
    /// The Python value of a field.
    fn to_py<'py>(py: Python<'py>, value: &Self::Value) -> PyResult<Bound<'py, PyAny>>;

    /// The field `name` of the Python event `event`.
    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Self::Value>;
}

/// `None`, or the value.
pub(crate) fn optional<'py, T: IntoPyObjectExt<'py>>(
    py: Python<'py>,
    value: Option<T>,
) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Some(value) => value.into_bound_py_any(py),
        None => Ok(py.None().into_bound(py)),
    }
}

/// A tuple of ints that the cycle collector no longer visits. Holding only ints it cannot be
/// part of a reference cycle, so CPython itself untracks such a tuple at the first collection
/// that meets it; doing it now spares those collections (made often by the ~1,600 tracked
/// objects of a page-1 request's events) from visiting it.
pub(crate) fn int_tuple<'py, T, I>(py: Python<'py>, ints: I) -> PyResult<Bound<'py, PyAny>>
where
    T: IntoPyObject<'py>,
    I: IntoIterator<Item = T>,
    I::IntoIter: ExactSizeIterator,
{
    let tuple = PyTuple::new(py, ints)?;
    debug_assert!(tuple.iter().all(|item| item.is_instance_of::<PyInt>()));
    // SAFETY: `tuple` is a live tuple (the `Bound` holds it) and the GIL is held.
    // PyObject_GC_UnTrack accepts an object that is not tracked (the empty tuple) and only
    // unlinks it from the collector's lists; the tuple stays valid and is freed as usual.
    unsafe { ffi::PyObject_GC_UnTrack(tuple.as_ptr().cast()) };
    Ok(tuple.into_any())
}

/// Attribute `name` of `object` as a `T`; a ValueError names `path` when it does not convert.
pub(crate) fn field<'py, T>(
    object: &Bound<'py, PyAny>,
    name: &Bound<'py, PyString>,
    path: impl FnOnce() -> String,
) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
    for<'a> <T as FromPyObject<'a, 'py>>::Error: Into<PyErr>,
{
    let value = object.getattr(name)?;
    value.extract::<T>().map_err(|error| {
        let error: PyErr = error.into();
        PyValueError::new_err(format!("{}: {}", path(), error.value(object.py())))
    })
}

impl PyField for kind::HashList {
    fn to_py<'py>(py: Python<'py>, value: &Hashes) -> PyResult<Bound<'py, PyAny>> {
        int_tuple(py, value)
    }

    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Hashes> {
        field::<Vec<i64>>(event, name, path).map(Hashes::from)
    }
}

impl PyField for kind::OptionalInt {
    fn to_py<'py>(py: Python<'py>, value: &Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        optional(py, *value)
    }

    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Option<i64>> {
        field(event, name, path)
    }
}

impl PyField for kind::TokenList {
    fn to_py<'py>(py: Python<'py>, value: &Tokens) -> PyResult<Bound<'py, PyAny>> {
        int_tuple(py, value)
    }

    /// The token ids as u32; a ValueError names the first id outside [0, 2**32).
    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Tokens> {
        if let Ok(tokens) = event.getattr(name)?.extract::<Vec<u32>>() {
            return Ok(tokens.into());
        }
        let wide: Vec<i64> = field(event, name, path)?;
        let (position, token) = wide
            .iter()
            .enumerate()
            .find(|(_, token)| u32::try_from(**token).is_err())
            .map_or((0, 0), |(position, token)| (position, *token));
        Err(PyValueError::new_err(format!(
            "{}[{position}]: token id {token} outside [0, 2**32)",
            path()
        )))
    }
}

impl PyField for kind::BlockSize {
    fn to_py<'py>(py: Python<'py>, value: &u32) -> PyResult<Bound<'py, PyAny>> {
        value.into_bound_py_any(py)
    }

    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<u32> {
        let block_size: u32 = field(event, name, path)?;
        if block_size == 0 {
            return Err(PyValueError::new_err(format!(
                "{}: expected a positive int, got 0",
                path()
            )));
        }
        Ok(block_size)
    }
}

impl PyField for kind::OptionalMedium {
    fn to_py<'py>(py: Python<'py>, value: &Option<Medium>) -> PyResult<Bound<'py, PyAny>> {
        optional(py, value.as_deref())
    }

    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Option<Medium>> {
        Ok(field::<Option<String>>(event, name, path)?.map(Medium::from))
    }
}

impl PyField for kind::OptionalReason {
    fn to_py<'py>(py: Python<'py>, value: &Option<RemovalReason>) -> PyResult<Bound<'py, PyAny>> {
        optional(py, value.map(RemovalReason::name))
    }

    /// The reason named; a ValueError names `path` when it is not one.
    fn from_py<'py>(
        event: &Bound<'py, PyAny>,
        name: &Bound<'py, PyString>,
        path: &dyn Fn() -> String,
    ) -> PyResult<Option<RemovalReason>> {
        field::<Option<String>>(event, name, path)?
            .map(|name| {
                RemovalReason::from_name(&name).ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{}: expected \"evicted\", \"demoted\" or None, got {name:?}",
                        path()
                    ))
                })
            })
            .transpose()
    }
}
