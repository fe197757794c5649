# The swa-es image: the `swa-es` command (serve, follow, demo, ...) plus the test suite, so the
# compose stack's `tests` service can run `pytest -m compose` against the other services.
#
#   docker build -t swa-es:local .
#   docker run --rm swa-es:local demo --duration 5
# The native core (native/, Rust) is compiled by maturin in a Rust image into an abi3 wheel.
FROM rust:1-slim-bookworm AS native
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip python3-venv \
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /build && /build/bin/pip install "maturin>=1.9,<2"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY native ./native
COPY swa_es ./swa_es
COPY cache ./cache
COPY log ./log
COPY consumers ./consumers
RUN /build/bin/maturin build --release --out /wheels

FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# CPU wheels of torch keep the image small; the cache runs on cuda too where the host has it.
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.4"

WORKDIR /app
# Dependencies first (a layer that survives source edits), then the source.
COPY pyproject.toml README.md ./
COPY --from=native /wheels /wheels
RUN pip install "$(ls /wheels/swa_es-*.whl)[dev]"
COPY tests ./tests
COPY bench ./bench

# Followers keep snapshots and status files here; mount a volume on it.
RUN useradd --create-home --uid 10001 swa && mkdir -p /data && chown swa /data
USER swa
VOLUME ["/data"]
EXPOSE 9100

ENTRYPOINT ["swa-es"]
CMD ["--help"]
