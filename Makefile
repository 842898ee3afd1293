# One-word targets over CMake. `make demo` and `make test` (the README's first commands, and CI's
# on a fresh machine) install what is missing first (scripts/install-deps.sh: apt, pip); the build
# targets themselves never run the installer.
BUILD ?= build
ASAN  ?= build-asan
JOBS  ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: all deps build asan clang test test-fast test-python demo bench info install fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DQMM_WERROR=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

asan:
	cmake -S . -B $(ASAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQMM_SANITIZE=ON -DQMM_WERROR=ON >/dev/null
	cmake --build $(ASAN) -j$(JOBS)

# clang builds everything too, warnings as errors (gcc and clang must both stay warning-free)
clang:
	CC=clang cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DQMM_WERROR=ON >/dev/null
	cmake --build build-clang -j$(JOBS)

# The clang tree runs the kernel testers too: clang vectorizes differently from gcc (it once
# turned avx2_int8's multiply-adds into AVX-VNNI instructions under a too-wide -m flag).
CLANG_TESTS = engines|ukernels|prepass|numerics|float_act|test_api$$|fuzz_corpus

# The README's test command: every test in the release build, then again under ASan+UBSan
# (smaller shapes there: QMM_TEST_QUICK=1); the clang build must compile warning-free and pass
# the kernel testers; then the Python package and its comfy-kitchen backend
# (scripts/test-python.sh: venv, pip install ., pytest).
test: deps
	@$(MAKE) --no-print-directory build asan clang
	cd $(BUILD) && ctest --output-on-failure
	cd $(ASAN) && QMM_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure
	cd build-clang && QMM_TEST_QUICK=1 ctest --output-on-failure -R '$(CLANG_TESTS)'
	BUILD=$(BUILD) bash scripts/test-python.sh

test-fast: build
	cd $(BUILD) && ctest --output-on-failure

test-python: build
	BUILD=$(BUILD) bash scripts/test-python.sh

demo: deps
	@$(MAKE) --no-print-directory build
	./$(BUILD)/qmm demo

bench: build
	./$(BUILD)/qmm bench

info: build
	./$(BUILD)/qmm info

# headers, libqmm (static + shared), the qmm CLI, qmm.pc and the CMake package under PREFIX
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# libFuzzer targets (clang) on copies of the committed corpus, FUZZ_SECONDS each (docs/FUZZING.md)
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DQMM_FUZZ=ON -DQMM_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build-fuzz -j$(JOBS) --target fuzz_safetensors fuzz_checkpoint fuzz_engines fuzz_attention
	mkdir -p build-fuzz/corpus/safetensors build-fuzz/corpus/checkpoint build-fuzz/corpus/engines build-fuzz/corpus/attention
	cp fuzz/corpus/safetensors/* fuzz/corpus/checkpoint/* build-fuzz/corpus/safetensors/
	cp fuzz/corpus/checkpoint/* build-fuzz/corpus/checkpoint/
	cp fuzz/corpus/engines/* build-fuzz/corpus/engines/
	cp fuzz/corpus/attention/* build-fuzz/corpus/attention/
	cd build-fuzz && ./fuzz_safetensors -max_len=4096 -max_total_time=$(FUZZ_SECONDS) corpus/safetensors
	cd build-fuzz && ./fuzz_checkpoint -max_len=4096 -max_total_time=$(FUZZ_SECONDS) corpus/checkpoint
	cd build-fuzz && ./fuzz_engines -max_len=8192 -max_total_time=$(FUZZ_SECONDS) corpus/engines
	cd build-fuzz && ./fuzz_attention -max_len=6000 -max_total_time=$(FUZZ_SECONDS) corpus/attention

clean:
	rm -rf $(BUILD) $(ASAN) build-clang build-fuzz
