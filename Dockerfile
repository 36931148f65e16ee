# elastic-ft image: eft-controller, eft-worker, eftctl and eft-train (CPU build; GPU images build
# eft-train against the host's CUDA PyTorch instead, docs/docker.md).
#   docker build -t eft .
#   docker run --rm eft eft-controller --help
# The build stage runs the same install script and build as CI (scripts/install-deps.sh, make).
FROM debian:12 AS build
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN make build BUILD_DIR=/build BUILD_TYPE=Release \
 && mkdir -p /out/bin /out/lib/eft \
 && cp /build/controller/eft-controller /build/worker/eft-worker /build/cli/eftctl /build/trainer/eft-train /out/bin/ \
 && cp /build/trainer/libeft_spm.so /out/lib/eft/

# Runtime: the same Debian packages (LibTorch, gRPC and friends are shared libraries), without
# the build and test tools' files.
FROM debian:12
ENV DEBIAN_FRONTEND=noninteractive
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && /tmp/install-deps.sh && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh
COPY --from=build /out/bin/ /usr/local/bin/
COPY --from=build /out/lib/eft/ /usr/local/lib/eft/
COPY deploy/config/ /etc/eft/examples/
RUN useradd --uid 10001 --user-group --home-dir /var/lib/eft --create-home eft
USER 10001
WORKDIR /var/lib/eft
EXPOSE 7070 8080 9101
CMD ["eft-controller", "--help"]
