# Thin wrapper over CMake for the quick-start commands.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo asan clean install stress-full python

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Issue 8's stress suite in full mode: many more seeds and sizes than the
# quick mode `make test` runs (N up to 8192 with backward); prints its run time.
stress-full: build
	@cd $(BUILD)/tests && ATTN_STRESS_FULL=1 OMP_WAIT_POLICY=passive ./test_stress

# The same tests built with AddressSanitizer and UBSan.
asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DATTN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

# The seeds' worked examples, one explained step by step, pictures, and
# attention learning the database lookup.
demo: build
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

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf build build-asan
