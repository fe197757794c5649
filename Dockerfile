# The swa-es image: the `swa-es` command (serve, follow, demo, ...) plus the test suite, so the
# compose stack's `tests` service can run `pytest -m compose` against the other services.
#
#   docker build -t swa-es:local .
#   docker run --rm swa-es:local demo --duration 5
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
RUN mkdir -p swa_es cache log consumers \
    && touch swa_es/__init__.py cache/__init__.py log/__init__.py consumers/__init__.py \
    && pip install ".[dev]" \
    && pip uninstall -y swa-es \
    && rm -rf swa_es cache log consumers
COPY swa_es ./swa_es
COPY cache ./cache
COPY log ./log
COPY consumers ./consumers
COPY tests ./tests
COPY bench ./bench
RUN pip install --no-deps -e .

# Followers keep snapshots and status files here; mount a volume on it.
RUN useradd --create-home --uid 10001 swa && mkdir -p /data && chown swa /data
USER swa
VOLUME ["/data"]
EXPOSE 9100

ENTRYPOINT ["swa-es"]
CMD ["--help"]
