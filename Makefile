# dsopt: two commands for a fresh Debian machine (as root):
#   make demo   install what is missing, build, import the bundled example
#   make test   install what is missing, build, run every test
BUILD_DIR ?= build

.PHONY: all deps build demo test check clean

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

clean:
	rm -rf $(BUILD_DIR)
