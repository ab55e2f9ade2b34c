# dra-fake: the simulated NVIDIA DRA driver (kubelet plugins, controller, offline tools).
# make image (docker or podman). The kubelet plugin runs as root via the chart's securityContext
# (it writes the kubelet's and the CDI root's host directories); everything else runs as the
# image's non-root user.
#
# Build arguments: PYTHON_IMAGE, any Debian-based image with python3 and python3-venv (default:
# the public Python image); NATIVE_IMAGE, any Debian-based image, to build dra-fake's NVML library
# in (C, libc only; gcc, libc6-dev and make are installed when it has no gcc); PIP_OFFLINE=1
# installs from the wheels in build/wheels only (make kind-images builds both offline:
# docs/kind.md).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG NATIVE_IMAGE=debian:bookworm-slim

# dra-fake's libnvidia-ml.so.1 and nvidia-smi (docs/nvml.md): the plugin ships them into pods
FROM ${NATIVE_IMAGE} AS native
SHELL ["/bin/sh", "-eu", "-c"]
WORKDIR /src
COPY native/ native/
# hadolint ignore=DL3008
RUN if ! command -v gcc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then \
      apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev make \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && make -C native BUILD=/out all check-glibc

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/dra-fake
WORKDIR /src
# pyproject.toml, README.md, dra_fake/, computedomain/ and, if present, build/wheels/ (.dockerignore)
COPY . ./
# package data of dra_fake.gpu.nvidia_smi (pyproject.toml)
COPY --from=native /out/libnvidia-ml.so.1 dra_fake/gpu/nvidia_smi/native/libnvidia-ml.so.1
COPY --from=native /out/nvidia-smi dra_fake/gpu/nvidia_smi/native/nvidia-smi
ARG PIP_OFFLINE=""
# Runtime dependencies only (no [dev] extra); a regular (non-editable) install into the venv.
RUN /opt/dra-fake/bin/pip install --no-compile ${PIP_OFFLINE:+--no-index --find-links /src/build/wheels} . \
 && /opt/dra-fake/bin/python -m compileall -q /opt/dra-fake/lib \
 && /opt/dra-fake/bin/dra-fake --help > /dev/null

FROM ${PYTHON_IMAGE}
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="dra-fake" \
      org.opencontainers.image.description="A DRA driver that simulates NVIDIA GPUs (gpu.nvidia.com) for clusters without GPUs" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/dra-fake/dra-fake"
COPY --from=build /opt/dra-fake /opt/dra-fake
ENV PATH=/opt/dra-fake/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["dra-fake"]
CMD ["--help"]
