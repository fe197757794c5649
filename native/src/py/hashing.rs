//! Bindings of `crate::hashing` (the chain, the prior, one page).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::hashing;

/// Token ids as u32; a ValueError names the first one outside [0, 2**32).
pub(crate) fn tokens_u32(token_ids: &[i64]) -> PyResult<Vec<u32>> {
    token_ids
        .iter()
        .map(|&token| {
            u32::try_from(token)
                .map_err(|_| PyValueError::new_err(format!("token id {token} outside [0, 2**32)")))
        })
        .collect()
}

/// The whole pages of `token_ids` as u32, after checking `page_size`.
fn whole_pages(token_ids: &[i64], page_size: usize) -> PyResult<Vec<u32>> {
    if page_size == 0 {
        return Err(PyValueError::new_err("page_size must be positive, got 0"));
    }
    tokens_u32(&token_ids[..token_ids.len() - token_ids.len() % page_size])
}

fn digest_array(digest: &[u8]) -> PyResult<&[u8; 32]> {
    digest.try_into().map_err(|_| {
        PyValueError::new_err(format!("a page digest has 32 bytes, got {}", digest.len()))
    })
}

#[pyfunction]
#[pyo3(signature = (extra_key))]
fn namespace_prior<'py>(py: Python<'py>, extra_key: Option<&str>) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &hashing::namespace_prior(extra_key))
}

#[pyfunction]
fn page_digest<'py>(
    py: Python<'py>,
    prior: &[u8],
    token_ids: Vec<i64>,
) -> PyResult<Bound<'py, PyBytes>> {
    let tokens = tokens_u32(&token_ids)?;
    Ok(PyBytes::new(py, &hashing::page_digest(prior, &tokens)))
}

#[pyfunction]
fn digest_to_block_hash(digest: &[u8]) -> PyResult<i64> {
    Ok(hashing::block_hash(digest_array(digest)?))
}

#[pyfunction]
fn chain_page_digests<'py>(
    py: Python<'py>,
    prior: &[u8],
    token_ids: Vec<i64>,
    page_size: usize,
) -> PyResult<Bound<'py, PyList>> {
    let tokens = whole_pages(&token_ids, page_size)?;
    let digests = py.detach(|| hashing::chain_page_digests(prior, &tokens, page_size));
    PyList::new(py, digests.iter().map(|d| PyBytes::new(py, d)))
}

#[pyfunction]
fn chain_block_hashes(
    py: Python<'_>,
    prior: &[u8],
    token_ids: Vec<i64>,
    page_size: usize,
) -> PyResult<Vec<i64>> {
    let tokens = whole_pages(&token_ids, page_size)?;
    let digests = py.detach(|| hashing::chain_page_digests(prior, &tokens, page_size));
    Ok(digests.iter().map(hashing::block_hash).collect())
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(namespace_prior, module)?)?;
    module.add_function(wrap_pyfunction!(page_digest, module)?)?;
    module.add_function(wrap_pyfunction!(digest_to_block_hash, module)?)?;
    module.add_function(wrap_pyfunction!(chain_page_digests, module)?)?;
    module.add_function(wrap_pyfunction!(chain_block_hashes, module)?)?;
    Ok(())
}
