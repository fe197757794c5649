//! Bindings of `crate::digest` (the `mix64-v1` block term).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::digest;

/// The digest term of one block.
#[pyfunction]
#[pyo3(signature = (block_hash, parent_block_hash, swa_resident))]
fn block_term(block_hash: i64, parent_block_hash: Option<i64>, swa_resident: bool) -> u64 {
    digest::block_term(block_hash, parent_block_hash, swa_resident)
}

/// The terms of a chain of pages: page i's parent is page i - 1, the first's is
/// `first_parent`.
#[pyfunction]
#[pyo3(signature = (block_hashes, first_parent, swa_resident))]
fn chain_block_terms(
    block_hashes: Vec<i64>,
    first_parent: Option<i64>,
    swa_resident: bool,
) -> Vec<u64> {
    let mut parent = first_parent;
    block_hashes
        .iter()
        .map(|&hash| {
            let term = digest::block_term(hash, parent, swa_resident);
            parent = Some(hash);
            term
        })
        .collect()
}

/// The digest term of a block held on the lower tier `medium` (not the GPU, whose blocks take
/// `block_term`).
#[pyfunction]
#[pyo3(signature = (block_hash, medium))]
fn tier_term(block_hash: i64, medium: &str) -> PyResult<u64> {
    if medium == "GPU" {
        return Err(PyValueError::new_err(
            "medium: a GPU block's term is block_term, got 'GPU'",
        ));
    }
    Ok(digest::tier_term(block_hash, medium))
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(block_term, module)?)?;
    module.add_function(wrap_pyfunction!(chain_block_terms, module)?)?;
    module.add_function(wrap_pyfunction!(tier_term, module)?)?;
    module.add("DIGEST_ALGORITHM", digest::ALGORITHM)?;
    Ok(())
}
