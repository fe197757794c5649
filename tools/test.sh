#!/usr/bin/env bash
# Runs the whole test suite, the Kafka tests included. Unless SWA_ES_KAFKA already names a broker,
# it starts the local single-node broker from tools/kafka for the run and stops it afterwards.
# Extra arguments go to pytest (e.g. `bash tools/test.sh -m "not slow"`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/python ]; then
    echo "no .venv here: run 'bash tools/setup.sh' first" >&2
    exit 2
fi
if [ -z "${SWA_ES_KAFKA:-}" ]; then
    trap 'tools/kafka/kafka.sh stop --clean >/dev/null 2>&1 || true' EXIT
    SWA_ES_KAFKA="$(tools/kafka/kafka.sh start --fresh | tail -n 1)"
    export SWA_ES_KAFKA
fi
# The Kafka tests must run, not skip: a missing broker fails them.
export SWA_ES_REQUIRE_KAFKA="${SWA_ES_REQUIRE_KAFKA:-1}"
echo "Kafka broker for the tests: $SWA_ES_KAFKA"
.venv/bin/python -m pytest "$@"
