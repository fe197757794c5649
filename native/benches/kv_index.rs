//! The replica store beside sgl-model-gateway's own KV index (crates.io `kv-index` 2.0.0,
//! `ChainIndex`), on the same blocks: apply rate, match latency, heap bytes per holder-block.
//!
//!     cargo bench --bench kv_index [-- --workers 64 --prompts 64]
//!
//! Both are fed the same page-16 store events (each worker stores whole 4,096-token prompts drawn
//! from one shared pool whose prompts open with the same system prompt; a store lists only the
//! pages the worker does not hold yet, under the last one it does). The replica store keeps its
//! holder index (what `match_prefix` needs); the `ChainIndex` gets the events' block hashes as
//! sequence hashes and `compute_content_hash` of each page, as the gateway computes them. Heap
//! bytes are counted by this binary's global allocator: what stays allocated after the apply.
//! Each side's answers are checked against the other's before anything is timed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use kv_index::{
    compute_content_hash, compute_request_content_hashes, ChainBlockMap, ChainIndex, ContentHash,
    SequenceHash, StoredBlock,
};
use swa_es_native::digest::mix64;
use swa_es_native::events::{Event, Stored};
use swa_es_native::hashing::{block_hash, chain_page_digests};
use swa_es_native::replica::{Answer, ReplicaStore, SourceMeta};

/// The system allocator, counting the bytes live at any moment.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; only a counter is updated beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const PAGE: usize = 16;
const PROMPT_TOKENS: usize = 4096;
const SYSTEM_PAGES: usize = 32;

/// The workload's sizes.
struct Shape {
    workers: usize,
    prompts_per_worker: usize,
    pool: usize,
}

impl Shape {
    fn from_args() -> Self {
        let mut shape = Self {
            workers: 64,
            prompts_per_worker: 64,
            pool: 1024,
        };
        let args: Vec<String> = std::env::args().collect();
        for pair in args.windows(2) {
            let value = || {
                pair[1]
                    .parse::<usize>()
                    .unwrap_or_else(|e| panic!("{} {}: {e}", pair[0], pair[1]))
            };
            match pair[0].as_str() {
                "--workers" => shape.workers = value(),
                "--prompts" => shape.prompts_per_worker = value(),
                "--pool" => shape.pool = value(),
                _ => {}
            }
        }
        shape
    }
}

/// One prompt of the pool: its tokens, block hashes (ours) and content hashes (the gateway's).
struct Prompt {
    tokens: Vec<u32>,
    hashes: Vec<i64>,
    contents: Vec<ContentHash>,
}

/// Prompts `first..first + count` of the pool.
fn pool(first: usize, count: usize) -> Vec<Prompt> {
    let system: Vec<u32> = (0..(SYSTEM_PAGES * PAGE) as u64)
        .map(|t| (mix64(t + 1) % 50_000) as u32)
        .collect();
    (first as u64..(first + count) as u64)
        .map(|p| {
            let mut tokens = system.clone();
            tokens.extend(
                (system.len() as u64..PROMPT_TOKENS as u64)
                    .map(|t| (mix64((p + 2) << 32 | t) % 50_000) as u32),
            );
            let hashes = chain_page_digests(&[], &tokens, PAGE)
                .iter()
                .map(block_hash)
                .collect();
            let contents = compute_request_content_hashes(&tokens, PAGE);
            Prompt {
                tokens,
                hashes,
                contents,
            }
        })
        .collect()
}

/// One store event of one worker: `count` pages of `prompt` from `first`, under page `first - 1`.
struct Store {
    worker: usize,
    prompt: usize,
    first: usize,
}

/// Each worker's stores, in order, and the holder-blocks they add up to.
fn stores(shape: &Shape) -> (Vec<Store>, usize) {
    let mut out = Vec::new();
    let mut held_total = 0;
    for worker in 0..shape.workers {
        let mut system_held = false;
        for k in 0..shape.prompts_per_worker {
            let prompt = (worker * 16 + k * 7) % shape.pool;
            let first = if system_held { SYSTEM_PAGES } else { 0 };
            system_held = true;
            held_total += PROMPT_TOKENS / PAGE - first;
            out.push(Store {
                worker,
                prompt,
                first,
            });
        }
    }
    (out, held_total)
}

fn ours_events(prompts: &[Prompt], stores: &[Store], workers: usize) -> Vec<Vec<Event>> {
    let mut per_worker: Vec<Vec<Event>> = (0..workers).map(|_| Vec::new()).collect();
    for store in stores {
        let prompt = &prompts[store.prompt];
        per_worker[store.worker].push(Event::Stored(Stored {
            hashes: prompt.hashes[store.first..].into(),
            parent: store.first.checked_sub(1).map(|at| prompt.hashes[at]),
            tokens: prompt.tokens[store.first * PAGE..].into(),
            block_size: PAGE as u32,
            lora_id: None,
            medium: None,
        }));
    }
    per_worker
}

/// A gateway store event: the worker, its blocks and their parent.
type TheirEvent = (usize, Vec<StoredBlock>, Option<SequenceHash>);

fn their_events(prompts: &[Prompt], stores: &[Store]) -> Vec<TheirEvent> {
    stores
        .iter()
        .map(|store| {
            let prompt = &prompts[store.prompt];
            let blocks = (store.first..prompt.hashes.len())
                .map(|at| StoredBlock {
                    seq_hash: SequenceHash::from(prompt.hashes[at]),
                    content_hash: compute_content_hash(&prompt.tokens[at * PAGE..(at + 1) * PAGE]),
                })
                .collect();
            let parent = store
                .first
                .checked_sub(1)
                .map(|at| SequenceHash::from(prompt.hashes[at]));
            (store.worker, blocks, parent)
        })
        .collect()
}

fn build_ours(events: &[Vec<Event>]) -> ReplicaStore {
    let mut store = ReplicaStore::new();
    store.enable_holders();
    for (worker, events) in events.iter().enumerate() {
        let name = format!("w{worker}");
        store.replica_mut(&name).meta = Some(SourceMeta {
            page_size: PAGE as u32,
            sliding_window_size: 0,
            swa_events: false,
            json: "{}".to_owned(),
        });
        store
            .apply_events(&name, events)
            .expect("a consistent stream");
    }
    store
}

/// The index, each worker's block map, and each worker's id in the index.
type Theirs = (ChainIndex, Vec<ChainBlockMap>, Vec<u32>);

fn build_theirs(events: &[TheirEvent], workers: usize) -> Theirs {
    let index = ChainIndex::new();
    let ids: Vec<u32> = (0..workers)
        .map(|w| index.intern_worker(&format!("w{w}")).expect("a worker id"))
        .collect();
    let mut maps: Vec<ChainBlockMap> = (0..workers).map(|_| ChainBlockMap::new()).collect();
    for (worker, blocks, parent) in events {
        index
            .apply_stored(ids[*worker], blocks, *parent, &mut maps[*worker])
            .expect("a consistent stream");
    }
    (index, maps, ids)
}

/// Best of three: seconds (wall) to build, and the heap bytes the result keeps.
fn timed_build<T>(build: impl Fn() -> T) -> (f64, isize, T) {
    let mut best = f64::MAX;
    let mut bytes = 0;
    let mut kept = None;
    for _ in 0..3 {
        drop(kept.take());
        let before = live_bytes();
        let started = Instant::now();
        let built = build();
        best = best.min(started.elapsed().as_secs_f64());
        bytes = live_bytes() - before;
        kept = Some(built);
    }
    (best, bytes, kept.expect("built"))
}

/// p50 and p99 in microseconds of `work` run once per query, `rounds` times over.
fn latencies(queries: usize, rounds: usize, mut work: impl FnMut(usize)) -> (f64, f64) {
    let mut samples = Vec::with_capacity(queries * rounds);
    for _ in 0..rounds {
        for q in 0..queries {
            let started = Instant::now();
            work(q);
            samples.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    samples.sort_by(f64::total_cmp);
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

/// Per worker index, the prefix in pages each side says it holds (workers holding none left out).
fn ours_pages(store: &mut ReplicaStore, tokens: &[u32]) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = store
        .match_prefix(&[], tokens)
        .into_iter()
        .filter_map(|(id, answer)| match answer {
            Answer::Held { tokens, .. } if tokens > 0 => {
                let name = &store.by_id(id).name;
                Some((name[1..].parse().expect("w<index>"), tokens / PAGE as u64))
            }
            _ => None,
        })
        .collect();
    out.sort_unstable();
    out
}

fn their_pages(index: &ChainIndex, ids: &[u32], contents: &[ContentHash]) -> Vec<(u32, u64)> {
    let mut out: Vec<(u32, u64)> = index
        .find_matches(contents, false)
        .scores
        .into_iter()
        .filter(|&(_, pages)| pages > 0)
        .map(|(id, pages)| {
            let worker = ids.iter().position(|&i| i == id).expect("a known worker");
            (worker as u32, u64::from(pages))
        })
        .collect();
    out.sort_unstable();
    out
}

fn row(what: &str, ours: String, theirs: String, ratio: f64) {
    println!("{what:<44} {ours:>20} {theirs:>20} {ratio:>8.2}x");
}

fn main() {
    let shape = Shape::from_args();
    let prompts = pool(0, shape.pool);
    let (stores, holder_blocks) = stores(&shape);
    let ours_in = ours_events(&prompts, &stores, shape.workers);
    let theirs_in = their_events(&prompts, &stores);
    let distinct: HashSet<i64> = stores
        .iter()
        .flat_map(|s| prompts[s.prompt].hashes[s.first..].iter().copied())
        .collect();
    println!(
        "{} workers, {} prompts of {PROMPT_TOKENS} tokens each (page {PAGE}, {SYSTEM_PAGES} \
         pages shared), {} store events: {holder_blocks} holder-blocks, {} distinct blocks",
        shape.workers,
        shape.prompts_per_worker,
        stores.len(),
        distinct.len()
    );

    let (ours_s, ours_bytes, mut ours) = timed_build(|| build_ours(&ours_in));
    let (theirs_s, theirs_bytes, (theirs, _maps, ids)) =
        timed_build(|| build_theirs(&theirs_in, shape.workers));

    // the same answers, asked for every prompt of the pool (held by some workers or none) and
    // for prompts no one stored that share the system prompt
    let mut queries: Vec<usize> = (0..shape.pool).collect();
    queries.truncate(256);
    let strangers = pool(shape.pool, 64);
    let asked: Vec<&Prompt> = queries
        .iter()
        .map(|&q| &prompts[q])
        .chain(strangers.iter())
        .collect();
    for prompt in &asked {
        let mine = ours_pages(&mut ours, &prompt.tokens);
        let their = their_pages(&theirs, &ids, &prompt.contents);
        assert_eq!(mine, their, "the two indexes disagree");
    }

    println!(
        "{:<44} {:>20} {:>20} {:>9}",
        "measure", "swa-es ReplicaStore", "kv-index ChainIndex", "ratio"
    );
    let rate = |s: f64| holder_blocks as f64 / s / 1e6;
    row(
        "apply, holder-blocks/s (best of 3)",
        format!("{:.2}M", rate(ours_s)),
        format!("{:.2}M", rate(theirs_s)),
        rate(ours_s) / rate(theirs_s),
    );
    let per_block = |bytes: isize| bytes as f64 / holder_blocks as f64;
    row(
        "heap bytes per holder-block",
        format!("{:.1}", per_block(ours_bytes)),
        format!("{:.1}", per_block(theirs_bytes)),
        per_block(ours_bytes) / per_block(theirs_bytes),
    );
    let rounds = 20;
    let (ours_p50, ours_p99) = latencies(asked.len(), rounds, |q| {
        black_box(ours.match_prefix(&[], &asked[q].tokens));
    });
    let (theirs_p50, theirs_p99) = latencies(asked.len(), rounds, |q| {
        let contents = compute_request_content_hashes(&asked[q].tokens, PAGE);
        black_box(theirs.find_matches(&contents, false));
    });
    let us = |v: f64| format!("{v:.1} us");
    row(
        "match from 4,096 token ids, p50",
        us(ours_p50),
        us(theirs_p50),
        ours_p50 / theirs_p50,
    );
    row(
        "match from 4,096 token ids, p99",
        us(ours_p99),
        us(theirs_p99),
        ours_p99 / theirs_p99,
    );
    let (ours_p50, ours_p99) = latencies(asked.len(), rounds, |q| {
        black_box(ours.match_hashes(PAGE as u32, &asked[q].hashes));
    });
    let (theirs_p50, theirs_p99) = latencies(asked.len(), rounds, |q| {
        black_box(theirs.find_matches(&asked[q].contents, false));
    });
    row(
        "match with the page hashes given, p50",
        us(ours_p50),
        us(theirs_p50),
        ours_p50 / theirs_p50,
    );
    row(
        "match with the page hashes given, p99",
        us(ours_p99),
        us(theirs_p99),
        ours_p99 / theirs_p99,
    );
}
