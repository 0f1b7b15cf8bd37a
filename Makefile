# Front door. `make run` sets up, builds and runs the main job on the bundled model;
# `make test` sets up, builds and runs the whole test suite (what CI runs).
BUILD ?= build
JOBS ?= 2

.PHONY: all setup build run test bench bench-model format clean

all: build

setup:
	bash scripts/bootstrap.sh

build: setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCODA_WERROR=ON
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/coda run -p "In the beginning God" -n 128

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# Kernel, tokenizer and sampler microbenchmarks, the model benchmark and the sampler/guard overhead
# (writes models under out/).
bench: build
	./$(BUILD)/bench/bench_kernels
	./$(BUILD)/bench/bench_tokenizer
	./$(BUILD)/bench/bench_sampling
	bash bench/bench_models.sh $(BUILD)/coda out
	bash bench/bench_overhead.sh $(BUILD)/coda out

format:
	clang-format -i $$(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'bench/*.cpp')

clean:
	rm -rf $(BUILD)
