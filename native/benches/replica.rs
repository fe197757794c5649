//! Micro-benchmark of the replica store (no Python): apply, prefix match, snapshot bytes.
//!
//!     cargo bench --bench replica
//!
//! The Python-level figures, side by side with their baselines, come from
//! `bench/replica_bench.py`; this one isolates the core.

use std::time::Instant;

/// Seconds this thread has run on a CPU (from /proc/thread-self/schedstat, in ns): on a shared,
/// overloaded machine the wall clock also counts the time other processes held the core.
fn cpu_s() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e9)
}

use swa_es_native::digest::mix64;
use swa_es_native::events::{Event, Stored};
use swa_es_native::hashing::{block_hash, chain_page_digests};
use swa_es_native::replica::{self, ReplicaStore, SourceMeta};

fn meta(page_size: u32) -> SourceMeta {
    SourceMeta {
        page_size,
        sliding_window_size: 4,
        swa_events: true,
        json: "{}".to_owned(),
    }
}

/// Page-1 branches of `pages` blocks each under one root block, `chains` of them.
fn page1_events(chains: usize, pages: usize, per_event: usize) -> Vec<Event> {
    let mut events = Vec::new();
    let mut seed = 1u64;
    let mut next = || {
        seed += 1;
        mix64(seed) as i64
    };
    for _ in 0..chains {
        let mut parent = None;
        let mut left = pages;
        while left > 0 {
            let count = per_event.min(left);
            let hashes: Vec<i64> = (0..count).map(|_| next()).collect();
            let tokens = hashes.iter().map(|&h| h as u32).collect();
            parent = hashes.last().copied().or(parent);
            let first_parent = if left == pages { None } else { parent };
            events.push(Event::Stored(Stored {
                hashes: hashes.into(),
                parent: first_parent,
                tokens,
                block_size: 1,
                lora_id: None,
                medium: None,
            }));
            left -= count;
        }
    }
    // fix the parents: each event chains onto the previous one of its branch
    let mut previous_tip = None;
    for event in &mut events {
        if let Event::Stored(stored) = event {
            if stored.parent.is_some() {
                stored.parent = previous_tip;
            }
            previous_tip = stored.hashes.last().copied();
        }
    }
    events
}

/// Page-1 stores of `per_event` chained pages each, each under a random earlier block (or the
/// root): the branches of a radix tree grown by many requests, every lookup a cache miss.
fn page1_branches(blocks: usize, per_event: usize) -> Vec<Event> {
    let mut seed = 7u64;
    let mut next = || {
        seed += 1;
        mix64(seed)
    };
    let mut held: Vec<i64> = Vec::with_capacity(blocks);
    let mut events = Vec::new();
    while held.len() < blocks {
        let parent = match next() % 8 {
            0 => None,
            _ if held.is_empty() => None,
            roll => Some(held[(roll.wrapping_mul(next()) % held.len() as u64) as usize]),
        };
        let hashes: Vec<i64> = (0..per_event).map(|_| next() as i64).collect();
        held.extend(&hashes);
        events.push(Event::Stored(Stored {
            tokens: hashes.iter().map(|&h| h as u32).collect(),
            hashes: hashes.into(),
            parent,
            block_size: 1,
            lora_id: None,
            medium: None,
        }));
    }
    events
}

fn bench_apply(blocks: usize, per_event: usize, holders: bool) -> ReplicaStore {
    bench_apply_events(
        page1_events(blocks / 4096, 4096, per_event),
        &format!("one chain, {per_event} per event"),
        holders,
    )
}

fn bench_apply_events(events: Vec<Event>, what: &str, holders: bool) -> ReplicaStore {
    let total: usize = events
        .iter()
        .map(|e| match e {
            Event::Stored(s) => s.hashes.len(),
            _ => 0,
        })
        .sum();
    let mut best = f64::MAX;
    let mut best_cpu = f64::MAX;
    let mut kept = ReplicaStore::new();
    for _ in 0..3 {
        let mut store = ReplicaStore::new();
        store.replica_mut("w").meta = Some(meta(1));
        if holders {
            store.enable_holders();
        }
        let started = Instant::now();
        let started_cpu = cpu_s();
        store.apply_events("w", &events).unwrap();
        best = best.min(started.elapsed().as_secs_f64());
        best_cpu = best_cpu.min(cpu_s() - started_cpu);
        kept = store;
    }
    println!(
        "apply {total} page-1 blocks, {what}{}: {:.1} M blocks/s wall, {:.1} \
         M/s cpu, {:.1} heap B/block (+{:.1} holder index)",
        if holders { ", holder index kept" } else { "" },
        total as f64 / best / 1e6,
        total as f64 / best_cpu / 1e6,
        kept.heap_bytes() as f64 / total as f64,
        kept.holders_heap_bytes() as f64 / total as f64
    );
    kept
}

fn bench_snapshot(store: &ReplicaStore) {
    let blocks = store.replicas()[0].blocks.len();
    let (mut write_s, mut read_s, mut holders_s) = (f64::MAX, f64::MAX, f64::MAX);
    let mut bytes = Vec::new();
    for _ in 0..5 {
        let started = cpu_s();
        bytes = replica::to_bytes(store);
        write_s = write_s.min(cpu_s() - started);
        let started = cpu_s();
        let mut loaded = replica::from_bytes(&bytes).unwrap();
        read_s = read_s.min(cpu_s() - started);
        assert_eq!(loaded.replicas()[0].blocks.len(), blocks);
        let started = cpu_s();
        loaded.enable_holders();
        holders_s = holders_s.min(cpu_s() - started);
    }
    println!(
        "snapshot {blocks} blocks: {} MB, to_bytes {:.1} ms, from_bytes {:.1} ms, holder index \
         build {:.1} ms (cpu, best of 5)",
        bytes.len() / 1_000_000,
        write_s * 1e3,
        read_s * 1e3,
        holders_s * 1e3
    );
}

fn bench_prefix(sources: usize, prompt_tokens: usize, page_size: usize) {
    // one more prompt than the store keeps the page digests of (8): asked for in turn, every
    // page of every query is hashed (cold); the first one asked for again reuses its digests
    let prompts: Vec<Vec<u32>> = (0..9u32)
        .map(|k| {
            (0..prompt_tokens as u32)
                .map(|t| t * 7 + 3 + k * 1_000_003)
                .collect()
        })
        .collect();
    let mut store = ReplicaStore::new();
    for source in 0..sources {
        let name = format!("w{source}");
        store.replica_mut(&name).meta = Some(meta(page_size as u32));
        for prompt in &prompts {
            let hashes: Vec<i64> = chain_page_digests(&[], prompt, page_size)
                .iter()
                .map(block_hash)
                .collect();
            let event = Event::Stored(Stored {
                hashes: hashes.as_slice().into(),
                parent: None,
                tokens: prompt.as_slice().into(),
                block_size: page_size as u32,
                lora_id: None,
                medium: None,
            });
            store.apply_events(&name, &[event]).unwrap();
        }
    }
    store.enable_holders();
    let mut measure = |pick: &dyn Fn(usize) -> usize| {
        let mut samples = Vec::new();
        for round in 0..2000 {
            let started = Instant::now();
            let answers = store.match_prefix(&[], &prompts[pick(round)]);
            samples.push(started.elapsed().as_secs_f64() * 1e6);
            assert_eq!(answers.len(), sources);
        }
        samples.sort_by(f64::total_cmp);
        (
            samples[samples.len() / 2],
            samples[samples.len() * 99 / 100],
        )
    };
    let (again, again_p99) = measure(&|_| 0);
    let (cold, cold_p99) = measure(&|round| round % prompts.len());
    let hash_started = Instant::now();
    for _ in 0..200 {
        std::hint::black_box(chain_page_digests(&[], &prompts[0], page_size));
    }
    let hash_us = hash_started.elapsed().as_secs_f64() * 1e6 / 200.0;
    println!(
        "prefix match {prompt_tokens} tokens, page {page_size}, {sources} sources: cold p50 \
         {cold:.1} us, p99 {cold_p99:.1} us; asked again p50 {again:.1} us, p99 {again_p99:.1} \
         us (hashing alone {hash_us:.1} us)"
    );
}

fn main() {
    // `cargo bench --bench replica -- apply` runs only the benchmarks whose name contains "apply"
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    if wanted("apply") {
        bench_apply(1 << 20, 1, false);
        bench_apply(1 << 20, 64, false);
        bench_apply(1 << 20, 1, true);
        bench_apply(1 << 20, 64, true);
    }
    if wanted("apply") || wanted("branches") {
        for (per_event, holders) in [(1, false), (16, false), (16, true)] {
            let events = page1_branches(1 << 20, per_event);
            let what = format!("random branches, {per_event} per event");
            bench_apply_events(events, &what, holders);
        }
    }
    if wanted("snapshot") {
        bench_snapshot(&bench_apply(1 << 20, 64, false));
    }
    if wanted("prefix") {
        bench_prefix(64, 4096, 16);
        bench_prefix(1, 4096, 16);
    }
}
