#!/usr/bin/env bash
# Make bench/.venv-dynamo: NVIDIA Dynamo's standalone KV indexer (`python -m dynamo.indexer`,
# PyPI ai-dynamo-runtime 1.6.1, an abi3 wheel with the Rust indexer inside) for the stream-out
# peer test (tests/bridge/test_stream_out_dynamo.py, marked dynamo).
#
# Recipe (found by trial: import, install what is missing, repeat): the wheel with --no-deps,
# plus pydantic (dynamo.runtime imports it at start; the wheel caps it at 2.13.5) and what
# pydantic imports, pinned to the versions tested. Nothing else is needed by the indexer: its
# HTTP server, ZMQ listeners and radix tree are in the wheel's native module. No GPU, no
# etcd, no NATS.
# Idempotent: exits at once when the venv already imports everything.
# Usage: bench/setup_dynamo.sh [VENV_DIR]   (default bench/.venv-dynamo)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/peer_venv.sh
source "$ROOT/bench/peer_venv.sh"

PROBE='from dynamo.llm import run_kv_indexer
import dynamo.indexer.main'

PACKAGES=(
  ai-dynamo-runtime==1.6.1
  pydantic==2.13.5 pydantic_core==2.46.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing_extensions==4.16.0
)

make_peer_venv setup_dynamo "${1:-$ROOT/bench/.venv-dynamo}" "$PROBE" "Dynamo 1.6.1's indexer" "${PACKAGES[@]}"
