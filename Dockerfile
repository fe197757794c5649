# The swa-es image: the `swa-es` command (serve, follow, bridge, route, ...).
#
# Everything Python comes from a wheelhouse the host makes (tools/compose.sh wheels):
# .compose/wheelhouse/deps holds torch and every dependency, .compose/wheelhouse/project the
# project's own wheel with its native core (built by maturin on the host). Nothing inside the
# build needs TLS: the only network use is Debian's apt over http, and only on a bare Debian base.
#
#   bash tools/compose.sh build                        # makes the wheelhouse, then this image
#   BASE_IMAGE=python:3.11-slim (default, a registry) or a local Debian bookworm base (no registry)
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A bare Debian bookworm base has no Python: Debian's python3 is 3.11 there, as the wheels want.
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/swa-es
ENV PATH=/opt/swa-es/bin:$PATH VIRTUAL_ENV=/opt/swa-es

# Dependencies first, in a layer that survives source edits; the wheels are bind-mounted, not
# copied, so they take no room in the image. The wheelhouse is the exact closure, hence --no-deps.
RUN --mount=type=bind,source=.compose/wheelhouse/deps,target=/wheels \
    pip install --no-index --no-deps /wheels/*.whl

RUN --mount=type=bind,source=.compose/wheelhouse/project,target=/wheels \
    pip install --no-index --no-deps /wheels/*.whl

# Followers keep snapshots and status files here; mount a volume on it.
RUN useradd --create-home --uid 10001 swa && mkdir -p /data && chown swa /data
USER swa
VOLUME ["/data"]
EXPOSE 9100

ENTRYPOINT ["swa-es"]
CMD ["--help"]
