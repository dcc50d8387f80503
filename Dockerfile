# syntax=docker/dockerfile:1.7
# pagedock images, one Dockerfile, four targets:
#   --target engine-cpu   torch's CPU build, prebuilt C++ kernels   `pagedock serve`
#   --target engine-cuda  CUDA runtime, torch + triton              `pagedock serve`
#   --target router       slim Python, no torch                     `pagedock route`
#   --target operator     slim Python, no torch                     `pagedock operator`
# e.g. docker build --target engine-cpu -t pagedock/engine-cpu . (images/build.sh builds them
# with buildah and a local base: `make images`). Every image's entrypoint is the `pagedock`
# command (pagedock/cli.py); its CMD picks the program. The engine and router images carry the
# built-in model, so they serve it without network. All run as user 10001 and write only to
# /tmp and /cache (the pods mount emptyDirs there over a read-only root).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
ARG TORCH_VERSION=2.13.0

# ---- wheel: the pagedock wheel, built once -------------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pagedock ./pagedock
COPY engine ./engine
COPY router ./router
COPY operator ./operator
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---- venvs: one extra of the wheel each ------------------------------------------------------
FROM ${PYTHON_IMAGE} AS router-venv
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[router]"

FROM ${PYTHON_IMAGE} AS operator-venv
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[operator]"

# ---- builtin-model: the built-in model's GGUF, fetched and checksummed by the registry -------
# The engine and router find it through PAGEDOCK_BUILTIN_MODELS_DIR before their cache.
FROM router-venv AS builtin-model
RUN PAGEDOCK_CACHE_DIR=/opt/pagedock /opt/venv/bin/python -c \
    "from pagedock.models.registry import BUILTIN_MODELS, fetch_builtin_model as f; [f(n) for n in BUILTIN_MODELS]"

# ---- slim runtime base: non-root user, no build tools ----------------------------------------
FROM ${PYTHON_IMAGE} AS slim
# The pods' cache environment (operator builders/common.py), so a plain run behaves the same.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/cache \
    HF_HOME=/cache/huggingface \
    PAGEDOCK_BUILTIN_MODELS_DIR=/opt/pagedock/models
# /cache: the pods mount an emptyDir there; without one it is a scratch folder, like /tmp.
RUN groupadd --gid 10001 pagedock \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagedock \
    && install -d -m 1777 /cache
WORKDIR /tmp

FROM slim AS router
COPY --from=router-venv /opt/venv /opt/venv
COPY --from=builtin-model /opt/pagedock/models/*.gguf /opt/pagedock/models/
USER 10001:10001
# 9002: the endpoint picker (gRPC), with `route --picker-port 9002` (docs/gateway-api.md)
EXPOSE 8080 9002
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"]
ENTRYPOINT ["pagedock"]
CMD ["route"]

FROM slim AS operator
COPY --from=operator-venv /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080 8081
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8081/healthz', timeout=2)"]
ENTRYPOINT ["pagedock"]
CMD ["operator", "run"]

# ---- engine-cpu: torch's CPU wheel and the C++ kernels, prebuilt per x86-64 level ------------
# A pod has no compiler and a read-only root, so the kernels cannot be JIT-built there; the
# engine loads the best prebuilt level its CPU supports (engine/kernels/prebuilt.py).
FROM ${PYTHON_IMAGE} AS engine-cpu-venv
ARG TORCH_VERSION
# Where torch's CPU wheels are; empty when pip's own configuration finds them (images/build.sh).
ARG TORCH_CPU_INDEX_URL=https://download.pytorch.org/whl/cpu
# The venv's ninja, for torch's extension builder.
ENV PATH=/opt/venv/bin:$PATH
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ python3-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir \
        ${TORCH_CPU_INDEX_URL:+--extra-index-url "$TORCH_CPU_INDEX_URL"} "torch==${TORCH_VERSION}+cpu" \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[engine]" \
    && python -m engine.kernels.prebuilt /opt/pagedock/kernels

FROM slim AS engine-cpu
# libgomp: the OpenMP runtime the prebuilt kernels link against.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=engine-cpu-venv /opt/venv /opt/venv
COPY --from=engine-cpu-venv /opt/pagedock/kernels /opt/pagedock/kernels
COPY --from=builtin-model /opt/pagedock/models/*.gguf /opt/pagedock/models/
ENV PAGEDOCK_CPU_KERNELS_DIR=/opt/pagedock/kernels \
    TRITON_CACHE_DIR=/cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["pagedock"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]

# ---- engine-cuda: CUDA runtime, torch + triton -----------------------------------------------
# Last, so that building the other targets never needs the CUDA base image.
FROM ${CUDA_IMAGE} AS engine-cuda-venv
ARG TORCH_VERSION
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" \
    && /opt/venv/bin/pip install --no-cache-dir "$(ls /wheels/pagedock-*.whl)[engine,gpu]"

FROM ${CUDA_IMAGE} AS engine-cuda
# Triton compiles a small C launcher per kernel on first use in the pod: it needs a C compiler
# and Python's headers at run time (the output goes to TRITON_CACHE_DIR).
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 gcc libc6-dev python3-dev \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 pagedock \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagedock \
    && install -d -m 1777 /cache
COPY --from=engine-cuda-venv /opt/venv /opt/venv
COPY --from=builtin-model /opt/pagedock/models/*.gguf /opt/pagedock/models/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    XDG_CACHE_HOME=/cache \
    HF_HOME=/cache/huggingface \
    TRITON_CACHE_DIR=/cache/triton \
    TORCHINDUCTOR_CACHE_DIR=/cache/torchinductor \
    PAGEDOCK_BUILTIN_MODELS_DIR=/opt/pagedock/models
WORKDIR /tmp
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=600s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]
ENTRYPOINT ["pagedock"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
