//! Python events into the core's `Event`: the one conversion that encoding an `EventBatch`
//! (`py::codec`) and applying Python events to a replica (`py::replica`) share. A field that
//! does not convert raises ValueError naming it as `events[i].field`.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyString;

use super::classes::Classes;
use crate::events::{Event, Hashes, Medium, RemovalReason, Stored};

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

/// The `RemovalReason` named by a Python event's `reason`; a ValueError names `path` when it is
/// not one.
fn removal_reason(
    name: Option<String>,
    path: impl FnOnce() -> String,
) -> PyResult<Option<RemovalReason>> {
    name.map(|name| {
        RemovalReason::from_name(&name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "{}: expected \"evicted\", \"demoted\" or None, got {name:?}",
                path()
            ))
        })
    })
    .transpose()
}

/// A store's `token_ids` as u32; a ValueError names the first id outside [0, 2**32).
fn token_ids(event: &Bound<'_, PyAny>, index: usize) -> PyResult<Vec<u32>> {
    let py = event.py();
    let path = || format!("events[{index}].token_ids");
    if let Ok(tokens) = event
        .getattr(intern!(py, "token_ids"))?
        .extract::<Vec<u32>>()
    {
        return Ok(tokens);
    }
    let wide: Vec<i64> = field(event, intern!(py, "token_ids"), path)?;
    let (position, token) = wide
        .iter()
        .enumerate()
        .find(|(_, token)| u32::try_from(**token).is_err())
        .map_or((0, 0), |(position, token)| (position, *token));
    Err(PyValueError::new_err(format!(
        "events[{index}].token_ids[{position}]: token id {token} outside [0, 2**32)"
    )))
}

/// The native `Event` of `event`, the `index`th of its batch.
pub(crate) fn event_from_py(
    py: Python<'_>,
    classes: &Classes,
    event: &Bound<'_, PyAny>,
    index: usize,
) -> PyResult<Event> {
    let class = event.get_type();
    let at = |name: &'static str| move || format!("events[{index}].{name}");
    let hashes = || {
        field::<Vec<i64>>(event, intern!(py, "block_hashes"), at("block_hashes")).map(Hashes::from)
    };
    let medium = || field::<Option<String>>(event, intern!(py, "medium"), at("medium"));
    if class.is(classes.stored.class(py)) {
        let hashes = hashes()?;
        let parent = field(
            event,
            intern!(py, "parent_block_hash"),
            at("parent_block_hash"),
        )?;
        let tokens = token_ids(event, index)?.into();
        let block_size: u32 = field(event, intern!(py, "block_size"), at("block_size"))?;
        if block_size == 0 {
            return Err(PyValueError::new_err(format!(
                "events[{index}].block_size: expected a positive int, got 0"
            )));
        }
        Ok(Event::Stored(Stored {
            hashes,
            parent,
            tokens,
            block_size,
            lora_id: field(event, intern!(py, "lora_id"), at("lora_id"))?,
            medium: medium()?.map(Medium::from),
        }))
    } else if class.is(classes.removed.class(py)) {
        Ok(Event::Removed {
            hashes: hashes()?,
            medium: medium()?.map(Medium::from),
            reason: removal_reason(
                field::<Option<String>>(event, intern!(py, "reason"), at("reason"))?,
                at("reason"),
            )?,
        })
    } else if class.is(classes.swa_evicted.class(py)) {
        Ok(Event::SwaEvicted { hashes: hashes()? })
    } else if class.is(classes.swa_restored.class(py)) {
        Ok(Event::SwaRestored { hashes: hashes()? })
    } else if class.is(classes.all_cleared_class.bind(py)) {
        Ok(Event::Cleared)
    } else {
        Err(PyValueError::new_err(format!(
            "events[{index}]: not an event: {}",
            event.repr()?
        )))
    }
}
