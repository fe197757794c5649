//! Python events into the core's `Event`: the one conversion that encoding an `EventBatch`
//! (`py::codec`) and applying Python events to a replica (`py::replica`) share, derived from
//! the table of event types (each field read by its kind, `super::event_fields`). A field that
//! does not convert raises ValueError naming it as `events[i].field`.

use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;

use super::classes::Classes;
use super::event_fields::PyField;
use crate::event_types::{kind, with_event_types, EventType};
use crate::events::{event_of, Event};

/// The event of type `kind` read from the Python event `event`, the `index`th of its batch.
macro_rules! event_from_fields {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        fn event_of_type(
            py: Python<'_>,
            kind: EventType,
            event: &Bound<'_, PyAny>,
            index: usize,
        ) -> PyResult<Event> {
            Ok(match kind {
                $(EventType::$variant => {
                    $(let $field = <kind::$kind as PyField>::from_py(
                        event,
                        intern!(py, $wire),
                        &|| format!("events[{index}].{}", $wire),
                    )?;)*
                    event_of!($variant [$($wrap)?] { $($field),* })
                })*
            })
        }
    };
}
with_event_types!(event_from_fields);

/// The native `Event` of `event`, the `index`th of its batch.
pub(crate) fn event_from_py(
    py: Python<'_>,
    classes: &Classes,
    event: &Bound<'_, PyAny>,
    index: usize,
) -> PyResult<Event> {
    let class = event.get_type();
    match EventType::ALL
        .into_iter()
        .find(|kind| class.is(classes.event(*kind).class(py)))
    {
        Some(kind) => event_of_type(py, kind, event, index),
        None => Err(PyValueError::new_err(format!(
            "events[{index}]: not an event: {}",
            event.repr()?
        ))),
    }
}
