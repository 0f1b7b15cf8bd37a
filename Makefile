# Front door. `make run` installs what the `coda` executable needs, builds only it and runs the main
# job on the bundled model; `make test` installs everything, builds everything and runs the whole test
# suite (what CI runs); `make install PREFIX=DIR` puts `coda` in DIR/bin and the bundled model in
# DIR/share/coda.
BUILD ?= build
JOBS ?= 2
PREFIX ?= $(HOME)/.local
CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCODA_WERROR=ON

.PHONY: all setup setup-run build build-coda run install test bench format clean

all: build

setup-run:
	bash scripts/bootstrap.sh run

setup:
	bash scripts/bootstrap.sh test

# Only the executable: no tests, sanitizer builds, fuzzers or benchmarks.
build-coda: setup-run
	$(CONFIGURE) -DCODA_TESTS=OFF -DCODA_BENCH=OFF
	cmake --build $(BUILD) -j $(JOBS) --target coda

build: setup
	$(CONFIGURE) -DCODA_TESTS=ON -DCODA_BENCH=ON
	cmake --build $(BUILD) -j $(JOBS)

run: build-coda
	./$(BUILD)/coda run -p "In the beginning God" -n 128

install: build-coda
	cmake --install $(BUILD) --prefix $(PREFIX)

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
