//! sgl-model-gateway's KV index (`kv-index` 2.0.0, `ChainIndex`) fed with the frames of an
//! sglang-format KV-event stream, asked with the index's own request hashing.
//!
//! One command a line on stdin, one JSON reply a line on stdout:
//!
//! - `F TOPIC_HEX PAYLOAD_HEX`: one ZMQ message of the stream (topic = the worker, payload = the
//!   msgpack `[ts, events, attn_dp_rank]` batch with sglang's tagged-array events); its events
//!   are applied through `ChainIndex::apply_stored` / `apply_removed` / `apply_cleared`. The
//!   reply counts what was applied and what the index refused.
//! - `Q BLOCK_SIZE TOKEN,TOKEN,...`: `compute_request_content_hashes` of the prompt, then
//!   `ChainIndex::find_matches`; the reply maps each worker to its matched prefix in tokens.
//!
//! Events of a tier other than the GPU are ignored (the index models the device tier).

use std::collections::HashMap;
use std::io::{self, BufRead, Write};

use kv_index::{
    compute_content_hash, compute_request_content_hashes, ChainBlockMap, ChainIndex, SequenceHash,
    StoredBlock,
};
use rmpv::Value;

/// The index, its per-worker block maps and worker names, and what was applied so far.
struct Peer {
    index: ChainIndex,
    maps: HashMap<u32, ChainBlockMap>,
    names: HashMap<u32, String>,
    applied: u64,
    refused: Vec<String>,
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd hex length {}", text.len()));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("hex: {e}")))
        .collect()
}

fn as_hash(value: &Value) -> Result<SequenceHash, String> {
    if let Some(v) = value.as_i64() {
        return Ok(SequenceHash::from(v));
    }
    value
        .as_u64()
        .map(SequenceHash::from)
        .ok_or_else(|| format!("not a block hash: {value}"))
}

fn as_array<'a>(value: &'a Value, what: &str) -> Result<&'a [Value], String> {
    value
        .as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{what} is not an array: {value}"))
}

fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Peer {
    fn new() -> Self {
        Self {
            index: ChainIndex::new(),
            maps: HashMap::new(),
            names: HashMap::new(),
            applied: 0,
            refused: Vec::new(),
        }
    }

    fn worker(&mut self, topic: &str) -> Result<u32, String> {
        let id = self.index.intern_worker(topic).map_err(|e| e.to_string())?;
        self.names.entry(id).or_insert_with(|| topic.to_string());
        self.maps.entry(id).or_default();
        Ok(id)
    }

    fn frame(&mut self, topic: &str, payload: &[u8]) -> Result<(), String> {
        let worker = self.worker(topic)?;
        let batch = rmpv::decode::read_value(&mut &payload[..]).map_err(|e| e.to_string())?;
        let fields = as_array(&batch, "the batch")?;
        let events = as_array(fields.get(1).ok_or("the batch has no events")?, "events")?;
        for event in events {
            self.event(worker, as_array(event, "an event")?)?;
        }
        Ok(())
    }

    fn event(&mut self, worker: u32, event: &[Value]) -> Result<(), String> {
        let tag = event
            .first()
            .and_then(Value::as_str)
            .ok_or("an event without a tag")?;
        let gpu = |at: usize| {
            event
                .get(at)
                .and_then(Value::as_str)
                .is_none_or(|m| m == "GPU")
        };
        let map = self.maps.get_mut(&worker).ok_or("unknown worker")?;
        match tag {
            "BlockStored" if gpu(6) => {
                let hashes = as_array(&event[1], "block_hashes")?;
                let parent = match &event[2] {
                    Value::Nil => None,
                    value => Some(as_hash(value)?),
                };
                let tokens: Vec<u32> = as_array(&event[3], "token_ids")?
                    .iter()
                    .map(|t| t.as_u64().map(|t| t as u32).ok_or(format!("token {t}")))
                    .collect::<Result<_, _>>()?;
                let size = event[4].as_u64().ok_or("block_size")? as usize;
                let mut blocks = Vec::with_capacity(hashes.len());
                for (i, hash) in hashes.iter().enumerate() {
                    let page = tokens
                        .get(i * size..(i + 1) * size)
                        .ok_or("short token_ids")?;
                    blocks.push(StoredBlock {
                        seq_hash: as_hash(hash)?,
                        content_hash: compute_content_hash(page),
                    });
                }
                match self.index.apply_stored(worker, &blocks, parent, map) {
                    Ok(()) => self.applied += 1,
                    Err(e) => self.refused.push(e.to_string()),
                }
            }
            "BlockRemoved" if gpu(2) => {
                let hashes: Vec<SequenceHash> = as_array(&event[1], "block_hashes")?
                    .iter()
                    .map(as_hash)
                    .collect::<Result<_, _>>()?;
                self.index.apply_removed(worker, &hashes, map);
                self.applied += 1;
            }
            "AllBlocksCleared" => {
                self.index.apply_cleared(worker, map);
                self.applied += 1;
            }
            "BlockStored" | "BlockRemoved" => {}
            other => return Err(format!("unknown event tag {other}")),
        }
        Ok(())
    }

    fn query(&self, block_size: usize, tokens: &[u32]) -> String {
        let hashes = compute_request_content_hashes(tokens, block_size);
        let scores = self.index.find_matches(&hashes, false);
        let mut parts: Vec<String> = scores
            .scores
            .iter()
            .filter_map(|(worker, blocks)| {
                let name = self.names.get(worker)?;
                Some(format!(
                    "{}:{}",
                    json_string(name),
                    *blocks as usize * block_size
                ))
            })
            .collect();
        parts.sort();
        format!("{{\"matched\":{{{}}}}}", parts.join(","))
    }

    fn status(&self) -> String {
        let refused: Vec<String> = self.refused.iter().map(|r| json_string(r)).collect();
        format!(
            "{{\"applied\":{},\"refused\":[{}]}}",
            self.applied,
            refused.join(",")
        )
    }
}

fn handle(peer: &mut Peer, line: &str) -> Result<String, String> {
    let mut parts = line.split(' ');
    match parts.next() {
        Some("F") => {
            let topic = unhex(parts.next().ok_or("F without a topic")?)?;
            let payload = unhex(parts.next().ok_or("F without a payload")?)?;
            let topic = String::from_utf8(topic).map_err(|e| e.to_string())?;
            peer.frame(&topic, &payload)?;
            Ok(peer.status())
        }
        Some("Q") => {
            let size: usize = parts
                .next()
                .ok_or("Q without a block size")?
                .parse()
                .map_err(|e| format!("block size: {e}"))?;
            let tokens: Vec<u32> = match parts.next() {
                None | Some("") => Vec::new(),
                Some(list) => list
                    .split(',')
                    .map(|t| t.parse().map_err(|e| format!("token {t}: {e}")))
                    .collect::<Result<_, _>>()?,
            };
            Ok(peer.query(size, &tokens))
        }
        other => Err(format!("unknown command {other:?}")),
    }
}

fn main() {
    let mut peer = Peer::new();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    for line in io::stdin().lock().lines() {
        let line = line.expect("stdin");
        let reply = handle(&mut peer, line.trim_end())
            .unwrap_or_else(|e| format!("{{\"error\":{}}}", json_string(&e)));
        writeln!(out, "{reply}").expect("stdout");
        out.flush().expect("stdout");
    }
}
