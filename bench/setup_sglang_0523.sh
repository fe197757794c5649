#!/usr/bin/env bash
# Make bench/.venv-sglang-0523: sglang 0.5.23's UnifiedRadixCache (FULL + SWA components) with its
# bundled Rust tree core importable on the CPU, for the sglang 0.5.23 integration tests.
#
# Recipe (found by trial: import, install what is missing, repeat):
#   * a venv from the same base interpreter as the project's .venv (Python 3.11);
#   * pip install --no-deps sglang==0.5.23, torch==2.14.1 (sglang's own pin: its Rust tree core
#     supports torch 2.11-2.14 and sglang falls back to the Python core outside that range, so the
#     project venv's newer torch would test the wrong core) and the pure import-time packages
#     below, pinned to the versions tested;
#   * a .pth file appends the project venv's site-packages (its CUDA 13 runtime libraries, which
#     torch 2.14.1 preloads by soname; only cuRAND is missing there, so it is installed here) and
#     the repository root to sys.path, after this venv's own.
# Idempotent: exits at once when the venv already imports everything.
# Usage: bench/setup_sglang_0523.sh [VENV_DIR]   (default bench/.venv-sglang-0523)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/peer_venv.sh
source "$ROOT/bench/peer_venv.sh"

PROBE='import torch
assert torch.__version__.startswith("2.14."), torch.__version__
from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
from sglang.srt.mem_cache.rust_tree_core import mem_cache
from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
import swa_es.engine.workload'

PACKAGES=(
  sglang==0.5.23 torch==2.14.1 torchvision==0.29.2 nvidia-curand==10.4.0.35
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-types==0.8.0
  apache-tvm-ffi==0.1.15.post2 attrs==26.1.0 certifi==2026.10.19.post1
  compressed-tensors==0.20.1 dill==0.4.1 einops==0.8.2 frozenlist==1.8.0 gguf==0.19.0
  h11==0.16.0 httpcore==1.0.9 httpx==0.29.0 httpx2==2.16.2 huggingface_hub==1.33.0
  ipython==9.18.1 loguru==0.7.3 msgspec==0.23.0 multidict==7.2.1 openai==3.57.0
  partial-json-parser==0.2.1.1.post7 pillow==13.0.0 propcache==0.5.4 psutil==7.2.2
  pybase64==1.5.1 pydantic==2.14.4 pydantic_core==2.50.5 pyzmq==27.3.0 regex==2026.11.19
  requests==2.34.2 safetensors==0.8.0 sentencepiece==0.2.3 sniffio==1.3.1 starlette==1.10.0
  tokenizers==0.22.2 tqdm==4.70.1 traitlets==5.16.1 transformers==5.12.1
  truststore==0.10.5 typing-inspection==0.4.5 urllib3==2.8.0 xgrammar==0.2.9 yarl==1.25.1
)

make_peer_venv setup_sglang_0523 "${1:-$ROOT/bench/.venv-sglang-0523}" "$PROBE" "sglang 0.5.23's UnifiedRadixCache and Rust tree core" "${PACKAGES[@]}"
