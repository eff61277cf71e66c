# PinLater-py server and worker image: `pinlater-server` by default; the same image runs
# `pinlater-worker` and the `pinlater` CLI (override the entrypoint). Every backend's driver is
# installed. Build: docker build -t pinlater:0.1.0 .
#
# Listens on 0.0.0.0: Thrift on 9010, Prometheus /metrics and /health on 9999 (PINLATER_PORT,
# PINLATER_METRICS_PORT). SQLite data (the default backend) lives in the volume /var/lib/pinlater.
# Config: mount a YAML file and pass `--config FILE`, or set PINLATER_* variables.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# pinlater/pinlater.thrift is a symlink to the IDL at the top level
COPY pyproject.toml README.md LICENSE pinlater.thrift ./
COPY pinlater ./pinlater
COPY backends ./backends
COPY worker_sdk ./worker_sdk
# wheels for the package and every dependency, so the runtime stage needs no compiler or index
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[all]"

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 pinlater \
    && useradd --system --uid 10001 --gid pinlater --home-dir /var/lib/pinlater \
       --create-home --shell /usr/sbin/nologin pinlater
COPY --from=build /wheels /tmp/wheels
# the package's own wheel by path (the version the build stage made), its extras from the wheels
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels \
        "$(ls /tmp/wheels/pinlater-*.whl)[all]" \
    && rm -rf /tmp/wheels
ENV PYTHONUNBUFFERED=1 \
    PINLATER_HOST=0.0.0.0 \
    PINLATER_METRICS_HOST=0.0.0.0 \
    PINLATER_DATA_DIR=/var/lib/pinlater/data
# numeric, so Kubernetes' runAsNonRoot can verify it
USER 10001:10001
WORKDIR /var/lib/pinlater
VOLUME ["/var/lib/pinlater"]
EXPOSE 9010 9999
# /health answers 200 while a shard takes enqueues, 503 otherwise (urlopen raises on 503)
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('PINLATER_METRICS_PORT', '9999'), timeout=2)"]
# SIGTERM: stop accepting, let in-flight requests finish (server.shutdown_grace_seconds)
STOPSIGNAL SIGTERM
ENTRYPOINT ["pinlater-server"]
CMD []
