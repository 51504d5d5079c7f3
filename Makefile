# Thin wrapper over CMake for the quick-start commands.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo asan clean install

all: build

build:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The same tests built with AddressSanitizer and UBSan.
asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan CMAKE_FLAGS="-DATTN_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"

demo: build
	@./$(BUILD)/attn example all

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf build build-asan
