//! Making instances of the event dataclasses (frozen, `slots=True`) by filling their slots in
//! place.
//!
//! `take_events()` makes ~540 events per page-1 request of the chat workload; made by
//! `object.__new__` called from here plus one `object.__setattr__` per field, they took ~165 µs
//! of such a request in a profile, ~96 µs once made in place (~81 µs with their int tuples
//! untracked too). A `SlotLayout` is learnt once per class by a probe: the class itself builds an
//! instance from distinct sentinel objects, and each field's slot is the one place in that
//! instance's memory holding its sentinel. New instances are then allocated by the class's own
//! `tp_alloc` (what `object.__new__` calls) and their slots written directly.

use std::mem::size_of;
use std::os::raw::c_void;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyType};

/// Where the `N` fields of one slotted class live in its instances, and its allocator.
pub(crate) struct SlotLayout<const N: usize> {
    class: Py<PyType>,
    alloc: ffi::allocfunc,
    offsets: [usize; N],
}

impl<const N: usize> SlotLayout<N> {
    /// Learn where `class` keeps `fields` (each a keyword of its constructor and a slot of its
    /// instances); a `TypeError` naming the class when its instances are not laid out so.
    pub(crate) fn learn(class: &Bound<'_, PyType>, fields: [&str; N]) -> PyResult<Self> {
        let py = class.py();
        let name = class.qualname()?;
        let refuse = |why: String| PyTypeError::new_err(format!("{name}: {why}"));
        let basic_size: usize = class.getattr("__basicsize__")?.extract()?;
        let item_size: usize = class.getattr("__itemsize__")?.extract()?;
        if item_size != 0 {
            return Err(refuse(format!(
                "variable-sized instances ({item_size} B an item)"
            )));
        }
        let object = py.import("builtins")?.getattr("object")?;
        let sentinels: Vec<Bound<'_, PyAny>> = fields
            .iter()
            .map(|_| object.call0())
            .collect::<PyResult<_>>()?;
        let kwargs = PyDict::new(py);
        for (field, sentinel) in fields.iter().zip(&sentinels) {
            kwargs.set_item(field, sentinel)?;
        }
        let probe = class.call((), Some(&kwargs))?;
        if !probe.get_type().is(class) {
            return Err(refuse("its constructor returned another type".to_owned()));
        }
        let word = size_of::<*mut ffi::PyObject>();
        let words: Vec<*mut ffi::PyObject> = (size_of::<ffi::PyObject>()..)
            .step_by(word)
            .take_while(|offset| offset + word <= basic_size)
            .map(|offset| {
                // SAFETY: `probe` is a live instance of `class` (checked above; the `Bound` keeps
                // it alive), whose instances are `__basicsize__` bytes with no items, so every
                // word read ends within `basic_size`, inside its allocation. CPython aligns an
                // instance and its slots to pointers, and the offsets step by a pointer from the
                // end of the object header, so each read is aligned. Only the pointer value is
                // read (compared below), never dereferenced.
                unsafe {
                    probe
                        .as_ptr()
                        .cast::<u8>()
                        .add(offset)
                        .cast::<*mut ffi::PyObject>()
                        .read()
                }
            })
            .collect();
        let mut offsets = [0; N];
        for ((offset, field), sentinel) in offsets.iter_mut().zip(fields).zip(&sentinels) {
            let mut places = words
                .iter()
                .enumerate()
                .filter(|(_, &word)| word == sentinel.as_ptr());
            match (places.next(), places.next()) {
                (Some((index, _)), None) => {
                    *offset = size_of::<ffi::PyObject>() + index * word;
                }
                _ => return Err(refuse(format!("no single slot holds field {field:?}"))),
            }
        }
        // SAFETY: `class` is a live type object (the `Bound` proves it and the GIL). For a heap
        // type PyType_GetSlot returns the slot's function, or NULL.
        let alloc = unsafe { ffi::PyType_GetSlot(class.as_ptr().cast(), ffi::Py_tp_alloc) };
        if alloc.is_null() {
            return Err(refuse("no tp_alloc".to_owned()));
        }
        // SAFETY: the `Py_tp_alloc` slot holds an `allocfunc` (CPython's `tp_alloc` type), and
        // `alloc` is not NULL.
        let alloc = unsafe { std::mem::transmute::<*mut c_void, ffi::allocfunc>(alloc) };
        Ok(SlotLayout {
            class: class.clone().unbind(),
            alloc,
            offsets,
        })
    }

    /// The class whose instances this lays out.
    pub(crate) fn class<'py>(&self, py: Python<'py>) -> &Bound<'py, PyType> {
        self.class.bind(py)
    }

    /// A new instance holding `values` in its fields, in the order given to `learn`. Its
    /// `__init__` does not run (a frozen dataclass's only checks its arguments' number).
    pub(crate) fn make<'py>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: the class is a live type (held by `self.class`) and `alloc` is its own
        // `tp_alloc`, called as `object.__new__` calls it: a new reference to a zeroed,
        // GC-tracked instance of the class, or NULL with an exception set.
        let instance = unsafe { (self.alloc)(self.class.as_ptr().cast(), 0) };
        if instance.is_null() {
            return Err(PyErr::fetch(py));
        }
        for (offset, value) in self.offsets.into_iter().zip(values) {
            // SAFETY: `instance` is a fresh instance of the class `learn` probed, so each offset
            // is the aligned, in-bounds slot of one field (same class, same layout), still NULL
            // (tp_alloc zeroes it). The slot takes over the strong reference `into_ptr` gives up,
            // which the instance's dealloc releases. Nothing between the allocation and these
            // writes runs Python code or allocates, so the collector never sees the instance
            // half filled (and NULL slots are valid for it anyway).
            unsafe {
                instance
                    .cast::<u8>()
                    .add(offset)
                    .cast::<*mut ffi::PyObject>()
                    .write(value.into_ptr());
            }
        }
        // SAFETY: `instance` is a new, non-NULL reference that we own.
        Ok(unsafe { Bound::from_owned_ptr(py, instance) })
    }
}
