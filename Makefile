# The two commands: `make demo` and `make test`. Everything else wraps CMake.
BUILD   ?= build
PREFIX  ?= /usr/local
JOBS    ?= $(shell nproc)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 300

.PHONY: all build demo test bench fuzz install clean deps test-deps

all: build

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

# Configures $(BUILD) with the tests ON or OFF ($(1)), in the one build directory: `make test` after
# `make demo` turns them on and reuses the library's objects. Only the tests need GoogleTest and
# torch, so `make`, `make demo` and `make install` leave them out. CMake runs again whenever the
# cache holds the other value, build.ninja is missing or CMAKE_FLAGS are given.
configure = @if [ -z "$(CMAKE_FLAGS)" ] && [ -f $(BUILD)/build.ninja ] && \
	  grep -qx 'TROVE_BUILD_TESTS:BOOL=$(1)' $(BUILD)/CMakeCache.txt; then :; else \
	  echo cmake --preset default -B $(BUILD) -DTROVE_BUILD_TESTS=$(1) $(CMAKE_FLAGS); \
	  cmake --preset default -B $(BUILD) -DTROVE_BUILD_TESTS=$(1) $(CMAKE_FLAGS); fi

build: deps
	$(call configure,OFF)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo $(BUILD)/bin

test: test-deps
	$(call configure,ON)
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1200

bench:
	@scripts/install-deps --bench
	cmake --preset bench -B $(BUILD) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS)
	/usr/bin/python3 bench/run.py --bin $(BUILD)/bin --out docs/benchmarks.md

fuzz:
	@scripts/install-deps --fuzz
	cmake --preset fuzz
	cmake --build build-fuzz -j $(JOBS)
	scripts/run-fuzzers build-fuzz/bin $(FUZZ_SECONDS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-fuzz
