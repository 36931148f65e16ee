# elastic-ft: the two set-up commands are `make demo` and `make test`; both install what is missing.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
CTEST_ARGS ?=
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test test-unit test-e2e demo clean

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

demo: build
	@scripts/demo.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)
