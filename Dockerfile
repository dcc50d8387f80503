# syntax=docker/dockerfile:1.7
# pagedock images, one Dockerfile, three targets:
#   docker build --target engine   -t pagedock/engine   .   CUDA, torch + triton, `pagedock serve`
#   docker build --target router   -t pagedock/router   .   slim Python, no torch, `pagedock route`
#   docker build --target operator -t pagedock/operator .   slim Python, no torch, `pagedock operator`
# Every image's entrypoint is the `pagedock` command (pagedock/cli.py); its CMD picks the program.
# CI does not build these (no Docker engine there); it lints this file with hadolint.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
ARG TORCH_VERSION=2.7.1

# ---- wheel: the pagedock wheel, built once -------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pagedock ./pagedock
COPY engine ./engine
COPY router ./router
COPY operator ./operator
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---- slim-venv: a virtualenv with one extra of the wheel (router or operator) ---------------
FROM ${PYTHON_IMAGE} AS router-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[router]"

FROM ${PYTHON_IMAGE} AS operator-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[operator]"

# ---- slim runtime base: non-root user, no build tools -------------------------------------
FROM ${PYTHON_IMAGE} AS slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
RUN groupadd --gid 10001 pagedock \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagedock
WORKDIR /tmp

FROM slim AS router
COPY --from=router-venv /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"]
ENTRYPOINT ["pagedock"]
CMD ["route"]

FROM slim AS operator
COPY --from=operator-venv /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8081
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=2)"]
ENTRYPOINT ["pagedock"]
CMD ["operator", "run"]

# ---- engine: CUDA runtime, torch + triton ---------------------------------------------------
FROM ${CUDA_IMAGE} AS engine-venv
ARG TORCH_VERSION
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[engine,gpu]"

FROM ${CUDA_IMAGE} AS engine
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 pagedock \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagedock
COPY --from=engine-venv /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HOME=/cache/huggingface \
    TRITON_CACHE_DIR=/cache/triton
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["pagedock"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
