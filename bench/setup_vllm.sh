#!/usr/bin/env bash
# Make bench/.venv-vllm: vLLM 0.33.0's KV-event publisher (vllm.distributed.kv_events) and its
# prefix-caching BlockPool importable on the CPU, for the bridge's vLLM peer tests
# (tests/peers/vllm_kv_engine.py runs in it), and its Scheduler with the CPU OffloadingConnector
# (tests/peers/vllm_offload_engine.py): its ModelConfig inspects a model architecture once,
# importing vLLM's attention layers, which need einops.
#
# Recipe (found by trial: import, install what is missing, repeat):
#   * a venv from the same base interpreter as the project's .venv (Python 3.11);
#   * pip install --no-deps vllm==0.33.0 plus the pure import-time packages below, pinned to
#     the versions tested;
#   * torch is NOT installed here: a .pth file appends the project venv's site-packages (its
#     torch) and the repository root to sys.path, after this venv's own packages. Nothing on
#     the import path of the modules used touches CUDA.
# Idempotent: exits at once when the venv already imports everything.
# Usage: bench/setup_vllm.sh [VENV_DIR]   (default bench/.venv-vllm)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/peer_venv.sh
source "$ROOT/bench/peer_venv.sh"

PROBE='from vllm.distributed.kv_events import ZmqEventPublisher, KVEventBatch
from vllm.v1.core.block_pool import BlockPool
import tests.peers.vllm_kv_engine
import einops
import tests.peers.vllm_offload_engine'

PACKAGES=(
  vllm==0.33.0
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
  annotated-types==0.8.0 apache-tvm-ffi==0.1.15.post2 attrs==26.1.0 cachetools==8.0.2
  cbor2==6.3.0 charset-normalizer==3.5.3 cloudpickle==3.1.3 distro==1.9.0 einops==0.8.2
  fastapi==0.165.0
  frozenlist==1.8.0 hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0
  importlib_metadata==10.2.0 jiter==0.19.0 llguidance==1.9.1 msgspec==0.23.0 multidict==7.2.1
  openai==3.57.0 openai-harmony==0.0.8 opentelemetry-api==1.45.2
  partial-json-parser==0.2.1.1.post7 pillow==13.0.0 propcache==0.5.4 psutil==7.2.2
  py-cpuinfo==9.0.0 pybase64==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5 pyzmq==27.3.0
  regex==2026.11.19 requests==2.34.2 safetensors==0.8.0 sniffio==1.3.1 tokenizers==0.23.3
  tqdm==4.70.1 transformers==5.25.0 truststore==0.10.5 typing-inspection==0.4.5
  urllib3==2.8.0 uvloop==0.23.0 xgrammar==0.2.9 yarl==1.25.1 zipp==4.1.2
)

make_peer_venv setup_vllm "${1:-$ROOT/bench/.venv-vllm}" "$PROBE" "vLLM 0.33.0's kv_events" "${PACKAGES[@]}"
