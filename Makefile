# Thin wrapper over CMake for the quick-start commands.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build build-quiet test demo asan tsan fuzz fuzz-build clean install stress-full python tile-cycles

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The build with its output kept in a log, shown only when it fails.
build-quiet:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The stress suite in full mode: many more seeds and sizes than the
# quick mode `make test` runs (N up to 8192 with backward); prints its run time.
stress-full: build
	@cd $(BUILD)/tests && ATTN_STRESS_FULL=1 OMP_WAIT_POLICY=passive ./test_stress

# The same tests built with AddressSanitizer and UBSan.
asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DATTN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The seeds' worked examples, one explained step by step, pictures, and
# attention learning the database lookup.
demo: build-quiet
	@./$(BUILD)/attn example all
	@./$(BUILD)/attn explain --weights examples/numpy_seed42.safetensors --x "1,2,3;3,3,2"
	@./$(BUILD)/attn heatmap --tokens "the hunter saw a duck" \
	  --x "1,0,0,1;0.81,0.59,1,1;0.31,0.95,0,1;-0.31,0.95,0,1;-0.81,0.59,1,1" \
	  --wq "16.18,-11.76,0,0;11.76,16.18,0,0;0,0,0,0;0,0,10,0" \
	  --wk "1,0,0,0;0,1,0,0;0,0,1,0;0,0,0,0" --wv "1,0,0,0;0,1,0,0;0,0,1,0;0,0,0,1" \
	  --wo "1,0,0,0;0,1,0,0;0,0,1,0;0,0,0,1" --heads 2 --title "Two heads, two questions" \
	  --out $(BUILD)/demo_heads.svg
	@./$(BUILD)/attn scaling --max-dk 1024 --svg $(BUILD)/demo_scaling.svg
	@./$(BUILD)/attn train --task recall --steps 300 --plot $(BUILD)/train_loss.svg
	@echo "pictures: $(BUILD)/demo_heads.svg $(BUILD)/demo_scaling.svg $(BUILD)/train_loss.svg"

# The Python package (python/attn) with the library just built next to it:
# importable with PYTHONPATH=python, or `pip install ./python` in a venv.
python: build
	@ln -sf $(abspath $(BUILD))/libattn.so python/attn/libattn.so
	@echo "python/attn/libattn.so -> $(abspath $(BUILD))/libattn.so"
	@echo "use: PYTHONPATH=$(CURDIR)/python /usr/bin/python3 -c 'import attn'"
	@echo " or: python3 -m venv --system-site-packages venv && venv/bin/pip install --no-build-isolation --no-deps ./python"

# make install PREFIX=DIR installs a relocatable tree into DIR.
install: build
	@cmake --install $(BUILD) $(if $(PREFIX),--prefix "$(PREFIX)")

# Threads calling attn at once, under gcc's ThreadSanitizer (OpenMP off).
tsan:
	@cmake -S . -B build-tsan -DATTN_TSAN=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target test_concurrency >build-tsan/build.log 2>&1 || { cat build-tsan/build.log; exit 1; }
	@cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -R test_concurrency

# libFuzzer on the readers (in memory and through a pipe), the JSON parser,
# the CLI's argument parser and the KV cache and varlen calls against the
# plain ones, FUZZ_TIME seconds each, from the committed seeds and
# dictionaries in fuzz/ (new finds go to build-fuzz/corpus/).
FUZZ_CC ?= $(shell command -v clang-14 || command -v clang)
FUZZ_TIME ?= 30
FUZZ_TARGETS = npy safetensors json cli_args kvcache_varlen
# (make fuzz-build builds them only; `make -o fuzz-build fuzz` runs them
# without building, as CI does in two lanes. The tree is clang's ASan + UBSan
# build too: CI builds and runs a subset of the tests there.)
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build-fuzz/corpus/$$t; \
	  echo "== fuzz_$$t for $(FUZZ_TIME) s =="; \
	  ./build-fuzz/fuzz/fuzz_$$t -max_total_time=$(FUZZ_TIME) -timeout=10 -rss_limit_mb=2048 \
	    -dict=fuzz/dict/$$t.dict -print_final_stats=1 build-fuzz/corpus/$$t fuzz/corpus/$$t \
	    2>build-fuzz/fuzz_$$t.log || { tail -n 60 build-fuzz/fuzz_$$t.log; exit 1; }; \
	  grep -E "^stat::number_of_executed_units|^Done" build-fuzz/fuzz_$$t.log; \
	done

fuzz-build:
	@test -n "$(FUZZ_CC)" || { echo "make fuzz needs clang (apt-get install clang)"; exit 1; }
	@cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=$(FUZZ_CC) -DATTN_FUZZ=ON -DATTN_MPI=OFF \
	  -DATTN_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS)) \
	  >build-fuzz/build.log 2>&1 || { cat build-fuzz/build.log; exit 1; }

# Cycles per part of the fused kernels, unmasked beside causal, from the
# profiling build (-DATTN_PROFILE=ON; bench/tile_cycles.c): e.g.
#   make tile-cycles ARGS="--threads 2 --mode backward"
tile-cycles:
	@cmake -S . -B build-profile -DATTN_PROFILE=ON -DATTN_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build-profile -j $(JOBS) --target tile_cycles >build-profile/build.log 2>&1 || { cat build-profile/build.log; exit 1; }
	@./build-profile/tile_cycles $(ARGS)

clean:
	@rm -rf build build-asan build-tsan build-fuzz build-profile
