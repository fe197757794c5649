//! Micro-benchmark of the recorder: what the serving loop pays to record a request, and what the
//! worker pays to process it (hash, digest, events). `cargo bench --bench recorder`.
//!
//! A request stores a 512-token suffix under the previous request's prefix (a growing chain of
//! nodes), cuts, and is claimed; the same work is timed page by page for SHA-256 alone, the floor.

use std::hint::black_box;
use std::time::Instant;

use swa_es_native::hashing;
use swa_es_native::recorder::{BatchLimits, Recorder};

const REQUESTS: u64 = 2_000;
const TOKENS_PER_REQUEST: usize = 512;

fn tokens(request: u64) -> Vec<u32> {
    (0..TOKENS_PER_REQUEST)
        .map(|i| (request as u32).wrapping_mul(2_654_435_761) ^ i as u32)
        .collect()
}

fn bench(page_size: usize) {
    let requests: Vec<Vec<u32>> = (0..REQUESTS).map(tokens).collect();
    let recorder = Recorder::new(page_size);
    recorder.cleared();
    recorder.root(1, None);
    let start = Instant::now();
    let mut cuts = Vec::with_capacity(REQUESTS as usize);
    for (index, tokens) in requests.iter().enumerate() {
        let node = index as u64 + 2;
        recorder.stored(node, node - 1, tokens);
        cuts.push(
            recorder
                .cut(BatchLimits::UNLIMITED)
                .expect("a store is an event"),
        );
    }
    let record = start.elapsed();
    let start = Instant::now();
    let mut pages = 0usize;
    for cut in &cuts {
        let outcome = recorder.claim(cut.id).expect("ops apply").expect("kept");
        pages += cut.events;
        black_box(outcome);
    }
    let process = start.elapsed();
    let start = Instant::now();
    let mut prior = [0u8; 32];
    for tokens in &requests {
        for page in tokens.chunks_exact(page_size) {
            prior = hashing::page_digest(&prior, page);
        }
    }
    black_box(prior);
    let sha = start.elapsed();
    let per_request = |d: std::time::Duration| d.as_secs_f64() * 1e6 / REQUESTS as f64;
    let per_page = |d: std::time::Duration| d.as_secs_f64() * 1e9 / pages as f64;
    println!(
        "page {page_size:2}: record+cut {:6.2} us/request ({:5.1} ns/page) | process {:7.1} ns/page \
         (sha256 alone {:6.1} ns/page)",
        per_request(record),
        per_page(record),
        per_page(process),
        per_page(sha),
    );
}

fn main() {
    for page_size in [1, 16] {
        bench(page_size);
    }
}
