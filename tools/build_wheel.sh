#!/usr/bin/env bash
# Builds the swa-es wheel, the native core (native/, Rust) compiled in, with the maturin of the
# .venv that tools/setup.sh makes.
#
#   build_wheel.sh [OUT_DIR]     the wheel into OUT_DIR (default: dist/); prints its path
#
# Install it into any Python 3.11+ environment, an engine's included, with the extras it needs:
#   pip install dist/swa_es-*.whl                       the log, the follower, the command line
#   pip install "$(ls dist/swa_es-*.whl)[kafka,service]"  a follower on Kafka with the routing API
# (docs/deploy.md says which extras each process needs.) The wheel is abi3: one build serves
# CPython 3.11 and later on the platform it was built on (docs/native.md).
#
# The build is reproducible: SOURCE_DATE_EPOCH is fixed, so the same sources give the same bytes
# (tools/compose.sh keeps an identical wheel as it was, which keeps Docker's layer cache).
# Earlier swa_es wheels in OUT_DIR are removed first, so `dist/swa_es-*.whl` names one file.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-dist}"
say() { echo "build_wheel.sh: $*" >&2; }

[ $# -le 1 ] || { say "usage: build_wheel.sh [OUT_DIR]"; exit 2; }
if [ ! -x .venv/bin/maturin ]; then
    say "error: no .venv/bin/maturin: run 'bash tools/setup.sh' first (it needs Python 3.11 and Rust)"
    exit 1
fi
mkdir -p "$out"
rm -f "$out"/swa_es-*.whl
SOURCE_DATE_EPOCH=315532800 .venv/bin/maturin build --quiet --release -o "$out" >&2
wheel="$(find "$out" -maxdepth 1 -name 'swa_es-*.whl' | head -n 1)"
[ -n "$wheel" ] || { say "error: maturin wrote no swa_es wheel into $out"; exit 1; }
echo "$wheel"
