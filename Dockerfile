# The gateway image: slim, non-root, with only the gateway's own dependencies (it never imports
# Ray, vLLM or serve_app). Build from the repository root:
#   docker build -t pd-gateway:0.1.0 .
# The Ray worker image is Dockerfile.ray.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# Dependencies are pinned exactly in pyproject.toml; serve_app and loadtests are not copied, so
# only the gateway package is installed, with its optional parts (PostgreSQL, Redis, OTLP/gRPC),
# and the other programs' console scripts are removed (their packages are not in the image).
# DL3013 (pin versions) is met by pyproject.toml's exact pins, which hadolint cannot see.
COPY pyproject.toml README.md ./
COPY configkit ./configkit
COPY gateway ./gateway
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[postgres,redis,otlp-grpc]" \
    && rm /opt/venv/bin/pd-serve /opt/venv/bin/pd-loadtest \
    && python -c "import gateway.cli"

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid gateway --no-create-home --shell /usr/sbin/nologin gateway
# Same path as in the build stage: the venv's scripts name their interpreter by absolute path.
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
# The image has no curl: ask /healthz with the standard library (server.port 8080 assumed).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]
ENTRYPOINT ["pd-gateway"]
CMD ["run", "--config", "/etc/pd-gateway/gateway.yaml"]
