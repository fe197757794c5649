//! Micro-benchmark of the recorder: what the serving loop pays to record a request, and what the
//! encoder thread pays to process it (hash, digest, events) and to write its v2 record.
//! `cargo bench --bench recorder`.
//!
//! A request stores a 512-token suffix under the previous request's prefix (a growing chain of
//! nodes), cuts, and is claimed; the same work is timed page by page for SHA-256 alone, the floor.

use std::hint::black_box;
use std::time::Instant;

use swa_es_native::hashing;
use swa_es_native::recorder::{step_records, BatchLimits, Numbering, Recorder, TokenIds};

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
    let mut outcomes = Vec::with_capacity(cuts.len());
    for cut in &cuts {
        outcomes.push(recorder.claim(cut.id).expect("ops apply").expect("kept"));
        pages += cut.events;
    }
    let process = start.elapsed();
    let numbering = Numbering {
        source: "bench",
        epoch: "0123456789abcdef0123456789abcdef",
        first_seq: 0,
        ts: 1.0,
    };
    let start = Instant::now();
    let mut bytes = 0usize;
    for (cut, outcome) in cuts.iter().zip(outcomes) {
        let records = step_records(
            outcome,
            &cut.batch_ends,
            &numbering,
            true,
            TokenIds::Written,
        )
        .expect("encodes");
        bytes += records.iter().map(|r| r.bytes.len()).sum::<usize>();
    }
    let encode = start.elapsed();
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
         (sha256 alone {:6.1} ns/page) | encode {:6.1} ns/page, {:5.1} bytes/page",
        per_request(record),
        per_page(record),
        per_page(process),
        per_page(sha),
        per_page(encode),
        bytes as f64 / pages as f64,
    );
}

fn main() {
    for page_size in [1, 16] {
        bench(page_size);
    }
}
