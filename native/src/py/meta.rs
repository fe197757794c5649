//! The typed meta of an epoch's first batch as a Python `cache.events.BatchMeta`, made from the
//! native parse (`crate::codec::Meta`), the one check of a meta: for decoded records and for
//! `parse_meta` (`py::codec`, what `BatchMeta` asks) alike. The instance is built without running its `__init__` (the
//! fields are already judged); keys besides the typed ones are handed to
//! `BatchMeta._extra_keys` only when the object has any.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use pyo3::IntoPyObjectExt;

use super::classes::{classes, new_uninitialised, set_field};
use crate::codec::Meta;

/// The `BatchMeta` of `meta`, whose JSON object is `text`.
pub(crate) fn batch_meta(py: Python<'_>, meta: &Meta, text: &str) -> PyResult<Py<PyAny>> {
    let class = classes(py)?.batch_meta.bind(py);
    let instance = new_uninitialised(class)?;
    let extra = if meta.has_extra_keys {
        class.call_method1(intern!(py, "_extra_keys"), (text,))?
    } else {
        PyDict::new(py).into_any()
    };
    let fields: [(&Bound<'_, PyString>, Bound<'_, PyAny>); 9] = [
        (
            intern!(py, "page_size"),
            meta.page_size.into_bound_py_any(py)?,
        ),
        (
            intern!(py, "sliding_window_size"),
            meta.sliding_window_size.into_bound_py_any(py)?,
        ),
        (
            intern!(py, "digest_alg"),
            meta.digest_alg.as_deref().into_bound_py_any(py)?,
        ),
        (
            intern!(py, "swa_events"),
            meta.swa_events.into_bound_py_any(py)?,
        ),
        (
            intern!(py, "device"),
            meta.device.as_deref().into_bound_py_any(py)?,
        ),
        (
            intern!(py, "producer"),
            meta.producer.as_deref().into_bound_py_any(py)?,
        ),
        (
            intern!(py, "digest_every_batches"),
            meta.digest_every_batches.into_bound_py_any(py)?,
        ),
        (
            intern!(py, "token_ids"),
            meta.token_ids.into_bound_py_any(py)?,
        ),
        (intern!(py, "extra"), extra),
    ];
    for (name, value) in &fields {
        set_field(&instance, name, value)?;
    }
    Ok(instance.unbind())
}
