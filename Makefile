# dsopt: two commands for a fresh Debian machine (as root):
#   make demo   install what is missing, build, import the bundled example
#   make test   install what is missing, build, run every test
#   make test-gpu  on a machine with an NVIDIA GPU: build with CUDA, run the
#                  GPU check (scripts/gpu-check.sh), report in gpu-check/
BUILD_DIR ?= build

.PHONY: all deps build demo test test-gpu check clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@if [ ! -f $(BUILD_DIR)/build.ninja ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja; fi
	cmake --build $(BUILD_DIR)

demo: build
	@scripts/demo.sh $(BUILD_DIR)

test: build
	cmake --build $(BUILD_DIR) --target check

GPU_CHECK_DIR ?= gpu-check
test-gpu:
	scripts/gpu-check.sh --build $(BUILD_DIR)-gpu $(GPU_CHECK_DIR)

clean:
	rm -rf $(BUILD_DIR)
