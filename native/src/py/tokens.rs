//! A prompt's token ids (Python ints) as u32, read in one pass.
//!
//! Only public, stable-ABI calls are used: a list's items through `PyList_GetItem` and an exact
//! int's value through `PyLong_AsLongLong` (no object is created, no Python code runs); any
//! item that is not an exact int in range takes the general path, which gives the same values
//! and the same errors. Buffers of integers (`array.array`, `bytes`, NumPy vectors, anything
//! with the buffer protocol) are copied in bulk.

use pyo3::buffer::{Element, PyUntypedBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};

/// The error for a token id that is not an int, or outside [0, 2**32).
fn bad_token(item: &Bound<'_, PyAny>) -> PyErr {
    match item.extract::<i64>() {
        Ok(token) => out_of_range(token),
        Err(_) if item.is_instance_of::<PyInt>() => {
            PyValueError::new_err(format!("token id {item} outside [0, 2**32)"))
        }
        Err(_) => PyTypeError::new_err(format!(
            "token ids must be ints, got {}",
            item.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        )),
    }
}

fn out_of_range(token: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("token id {token} outside [0, 2**32)"))
}

/// One item by the general conversion (any int, or an object with `__index__`).
fn general(item: &Bound<'_, PyAny>) -> PyResult<u32> {
    item.extract::<u32>().map_err(|_| bad_token(item))
}

/// Token ids of a prompt as u32 (TypeError for a non-int, ValueError for an id outside
/// [0, 2**32); the first bad item in order is the one named). A list is read through the C API,
/// a buffer of integers in bulk, any other sequence through its iterator.
pub(crate) fn prompt_tokens(token_ids: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    if let Ok(list) = token_ids.cast::<PyList>() {
        return list_tokens(list);
    }
    if let Some(tokens) = buffer_tokens(token_ids)? {
        return Ok(tokens);
    }
    token_ids.try_iter()?.map(|item| general(&item?)).collect()
}

// --- lists --------------------------------------------------------------------------------------

/// Items `at..len` of `list` while they are exact ints in [0, 2**32), appended to `out`;
/// returns how many were read (the caller takes the general path for the next one).
fn read_run(list: &Bound<'_, PyList>, at: usize, len: usize, out: &mut Vec<u32>) -> usize {
    let py = list.py();
    for index in at..len {
        // SAFETY: the GIL is held and `list` is alive (the `Bound` proves both). `index` is
        // below `len`, the list's length read by the caller with no Python code run since
        // (nothing in this loop runs any: no object is made, no method is called), so
        // PyList_GetItem returns a borrowed reference the list keeps alive while we read it (or
        // NULL with an IndexError set, were it shorter, which is cleared: the general path then
        // reads the item). PyLong_CheckExact compares the item's type with `int`, and
        // PyLong_AsLongLong of an exact int reads its value without running Python code,
        // reporting an overflow as -1 with an exception set, which is cleared too.
        let value = unsafe {
            let item = ffi::PyList_GetItem(list.as_ptr(), index as ffi::Py_ssize_t);
            if item.is_null() || ffi::PyLong_CheckExact(item) == 0 {
                let _ = PyErr::take(py);
                return index - at;
            }
            let value = ffi::PyLong_AsLongLong(item);
            if value == -1 {
                let _ = PyErr::take(py);
            }
            value
        };
        let Ok(value) = u32::try_from(value) else {
            return index - at;
        };
        out.push(value);
    }
    len - at
}

fn list_tokens(list: &Bound<'_, PyList>) -> PyResult<Vec<u32>> {
    // The length is read once and again only after the general path, the one place where
    // Python code (an `__index__`) can run and change the list.
    let mut len = list.len();
    let mut tokens = Vec::with_capacity(len);
    let mut at = 0;
    while at < len {
        at += read_run(list, at, len, &mut tokens);
        if at == len {
            break;
        }
        // the general path: an owned reference, then the general conversion and its errors
        let item = list.get_item(at)?;
        tokens.push(general(&item)?);
        at += 1;
        len = list.len();
    }
    Ok(tokens)
}

// --- buffers ------------------------------------------------------------------------------------

/// The ids of a one-dimensional buffer of native-order integers, None when `token_ids` is not
/// one (the iterator path then reads it; it yields these same values, as Python ints).
fn buffer_tokens(token_ids: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    // SAFETY: `token_ids` is a live object and the GIL is held (the `Bound` proves both);
    // PyObject_CheckBuffer only reads its type's slots.
    if unsafe { ffi::PyObject_CheckBuffer(token_ids.as_ptr()) } == 0 {
        return Ok(None);
    }
    let Ok(buffer) = PyUntypedBuffer::get(token_ids) else {
        return Ok(None);
    };
    let format = buffer.format().to_bytes();
    let code = match format {
        [code] | [b'@' | b'=', code] => *code,
        [b'<', code] if cfg!(target_endian = "little") => *code,
        _ => return Ok(None),
    };
    if buffer.dimensions() != 1 {
        return Ok(None);
    }
    let py = token_ids.py();
    match (code, buffer.item_size()) {
        (b'B', 1) => typed::<u8>(py, &buffer),
        (b'b', 1) => typed::<i8>(py, &buffer),
        (b'H', 2) => typed::<u16>(py, &buffer),
        (b'h', 2) => typed::<i16>(py, &buffer),
        (b'I' | b'L' | b'N', 4) => typed::<u32>(py, &buffer),
        (b'i' | b'l' | b'n', 4) => typed::<i32>(py, &buffer),
        (b'I' | b'L' | b'Q' | b'N', 8) => typed::<u64>(py, &buffer),
        (b'i' | b'l' | b'q' | b'n', 8) => typed::<i64>(py, &buffer),
        _ => Ok(None),
    }
}

/// The ids of `buffer` read as `T`s (None when pyo3 does not accept it as one).
fn typed<T>(py: Python<'_>, buffer: &PyUntypedBuffer) -> PyResult<Option<Vec<u32>>>
where
    T: Element + std::fmt::Display,
    u32: TryFrom<T>,
{
    let Ok(buffer) = buffer.as_typed::<T>() else {
        return Ok(None);
    };
    let values = buffer.to_vec(py)?;
    values
        .into_iter()
        .map(|value| u32::try_from(value).map_err(|_| out_of_range(value)))
        .collect::<PyResult<Vec<u32>>>()
        .map(Some)
}

/// The ids `token_ids` reads as (what prefix matching hashes), for tests.
#[pyfunction]
fn prompt_token_ids(token_ids: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    prompt_tokens(token_ids)
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(prompt_token_ids, module)?)?;
    Ok(())
}
