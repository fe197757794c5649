#!/usr/bin/env bash
# GPU check (issue 2, item 5): the gpu-marked tests, then the cache benchmark on cuda.
# Run from the repository root on a machine with a CUDA device; finishes in well under 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}

"$PY" -c 'import torch, sys; ok = torch.cuda.is_available(); print("cuda:", ok, torch.cuda.get_device_name(0) if ok else ""); sys.exit(0 if ok else 1)'

echo "== gpu-marked tests =="
timeout 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/

echo "== cache benchmark on cuda =="
if [[ -f bench/cache_bench.py ]]; then
    # The sglang venv is not carried to a device machine; ours alone, on cuda, events on and off.
    timeout 240 "$PY" bench/cache_bench.py --device cuda --requests 1000 --no-sglang "$@"
else
    echo "bench/cache_bench.py is missing" >&2
    exit 1
fi
