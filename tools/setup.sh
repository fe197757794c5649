#!/usr/bin/env bash
# Creates .venv in the repository root with swa-es installed editable (plus the dev extra), the
# native core (native/, Rust) compiled into cache/events/_native by maturin.
# Idempotent: a second run reuses the environment; it rebuilds the native core when native/ changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
missing=()
for tool in cargo rustc; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: ${missing[*]} not found: the native core (native/) needs a Rust toolchain," \
        "1.80 or newer (https://rustup.rs: curl https://sh.rustup.rs -sSf | sh)" >&2
    exit 1
fi
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=".venv/.swa-es-installed"
module="$(ls cache/events/_native*.so 2>/dev/null | head -n 1 || true)"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ -z "$module" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[dev]'
    touch "$stamp"
elif [ -n "$(find native/src native/Cargo.toml native/Cargo.lock -newer "$module" 2>/dev/null)" ]; then
    echo "setup: native/ changed; rebuilding the native core" >&2
    .venv/bin/maturin develop --release --skip-install --quiet
fi
echo "swa-es installed in $root/.venv"
