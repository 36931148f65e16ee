# elastic-ft image: eft-controller, eft-worker, eftctl and eft-train (docs/docker.md).
#   docker build -t ghcr.io/elastic-ft/eft:0.1.0 .
#   docker run --rm ghcr.io/elastic-ft/eft:0.1.0 eft-controller --help
# k8s/ runs it as ghcr.io/elastic-ft/eft:<tag>. `make image` builds it on a machine without a registry
# (scripts/image/: the engine and the Debian base images made locally) and scripts/image/smoke-test.sh
# starts its programs; tests/deploy/check_dockerfile.sh (in `make test`) checks it against the build.

# ---- build: the same Debian packages and pinned PyTorch as CI (scripts/install-deps.sh, which makes
# /src/.venv) and the Makefile's CMake configuration (Ninja), Release, without the tests; only the
# programs the image ships.
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-python.sh scripts/python-requirements.txt scripts/
# Extra CA certificates for pip's HTTPS, in this stage only (a TLS-inspecting proxy in front of PyPI):
# `make image` puts the bundle the host's pip trusts in scripts/image/extra-ca/ (its README) and passes
# --build-arg PIP_CERT=/etc/eft-build-ca/ca-certificates.crt; without it pip uses its own certificates.
# The runtime stage copies nothing of it.
COPY scripts/image/extra-ca/ /etc/eft-build-ca/
ARG PIP_CERT
ARG SSL_CERT_FILE
# No service starts while packages install (prometheus, munge and slurm come with init scripts).
RUN printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DEFT_BUILD_TESTS=OFF \
 && cmake --build /build --target eft-controller eft-worker eftctl eft-train eft_spm \
 && strip /build/controller/eft-controller /build/worker/eft-worker /build/cli/eftctl /build/trainer/eft-train
# Of .venv the runtime stage needs LibTorch's and CUDA's shared libraries, not what only compiles:
# nvcc and NVVM (the CUDA build's compiler; NVRTC has its own), headers, static libraries, CMake files,
# and torch's Python binding (~320 MB of the image); of pyarrow only Arrow C++ and Parquet's two
# libraries, which eft-train links for Parquet/Arrow datasets (~68 MB; cmake/EftArrow.cmake).
RUN site=/src/.venv/lib/python3.11/site-packages \
 && rm -rf "$site"/nvidia/cu13/bin "$site"/nvidia/cu13/nvvm "$site"/nvidia/cu13/lib/libnvvm.so* \
      "$site"/nvidia/cu13/lib/cmake "$site"/nvidia/*/include "$site"/torch/lib/libtorch_python.so \
 && find "$site"/nvidia "$site"/torch/lib -name '*.a' -delete \
 && find "$site"/pyarrow -mindepth 1 -maxdepth 1 ! -name 'libarrow.so.*' ! -name 'libparquet.so.*' -exec rm -rf {} + \
 && find /src/.venv/cuda -xtype l -delete

# ---- runtime: only the shared libraries the programs link (what `readelf -d` lists as NEEDED,
# mapped to Debian packages; check_dockerfile.sh recomputes this from the build), not the
# compilers, headers and test tools of the build stage. LibTorch is PyTorch's (the CUDA build, with
# NCCL): its libraries and the CUDA libraries they load are copied from the build stage's .venv to the
# same path, where eft-train's RUNPATH and the wheels' own $ORIGIN-relative RUNPATHs find them
# (~3.9 GB; the image trains on CPUs and, under the NVIDIA container runtime, on GPUs).
FROM debian:bookworm-slim
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      libabsl20220623 libgrpc++1.51 libgrpc29 libprotobuf32 libssl3 libsqlite3-0 libyaml-cpp0.7 \
      libpcre2-8-0 libutf8proc2 libsentencepiece0 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/.venv/lib/python3.11/site-packages/torch/lib /src/.venv/lib/python3.11/site-packages/torch/lib
COPY --from=build /src/.venv/lib/python3.11/site-packages/nvidia /src/.venv/lib/python3.11/site-packages/nvidia
COPY --from=build /src/.venv/cuda /src/.venv/cuda
COPY --from=build /src/.venv/lib/python3.11/site-packages/pyarrow /src/.venv/lib/python3.11/site-packages/pyarrow
COPY --from=build /build/controller/eft-controller /build/worker/eft-worker /build/cli/eftctl /build/trainer/eft-train /usr/local/bin/
# eft-train loads its SentencePiece module from ../lib/eft/ next to its own directory.
COPY --from=build /build/trainer/libeft_spm.so /usr/local/lib/eft/libeft_spm.so
COPY deploy/config/controller.yaml deploy/config/worker.yaml /etc/eft/examples/
RUN useradd --uid 10001 --user-group --home-dir /var/lib/eft --create-home --shell /usr/sbin/nologin eft \
 && install -d -o 10001 -g 10001 /var/lib/eft-worker
# The NVIDIA container runtime mounts the driver's CUDA libraries and nvidia-smi (the worker counts
# and watches its GPUs with it) when these capabilities are asked for.
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
WORKDIR /var/lib/eft
# gRPC, REST/metrics (--http), worker metrics (--metrics): each only when given its flag.
EXPOSE 7070 8080 9101
CMD ["eft-controller", "--help"]
