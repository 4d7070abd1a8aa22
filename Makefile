# The two commands: `make demo` and `make test`. Both install what is missing (Debian 12),
# configure, build, then run.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

# Debian packages the build needs; `deps` installs those that are missing.
PACKAGES := cmake ninja-build g++ llvm-19-dev libclang-19-dev lld-19 llvm-19-tools libzstd-dev zlib1g-dev \
            libgtest-dev libbenchmark-dev libopenmpi-dev openmpi-bin libhwloc-dev \
            liblld-19-dev rocm-device-libs libamdhip64-dev clang-format-19 clang-tidy-19 pkgconf dpkg-dev doxygen
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps configure build test test-sanitize demo docs bench bundle clean format format-check tidy-changed

all: build

deps:
	@missing=$$(for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

# The API reference (cmake/docs.cmake): Doxygen over the public headers into $(BUILD)/docs/html,
# failing on any warning.
docs: configure
	cmake --build $(BUILD) --target docs

test: build
	ctest --test-dir $(BUILD) --output-on-failure --timeout 900 -j $(JOBS)

# The suite again under ASan+UBSan, in its own build tree. -Og compiles as fast as -O0 and runs
# faster; -g1 (line tables only) names file and line in the reports for 5% more compile time,
# where -g costs 45%. The sanitizers write their reports to files rather than to stderr: some
# tests expect a failure or swallow a rank's output, and would pass over a report; any report
# fails the target after ctest. Leaks are checked (.ci/lsan.supp names those of others' code).
SANITIZE_BUILD ?= build-sanitize
SANITIZE_LOGS = $(CURDIR)/$(SANITIZE_BUILD)/sanitizer-logs
SANITIZE_ASAN = halt_on_error=1:check_initialization_order=1:strict_init_order=1:log_path=$(SANITIZE_LOGS)/asan
SANITIZE_ENV = LSAN_OPTIONS=suppressions=$(CURDIR)/.ci/lsan.supp \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(SANITIZE_LOGS)/ubsan
# Run without the leak check: hwloc's PCI plugin leaks (libpciaccess, in hwloc_topology_load)
# and is unloaded before LSan reports, so no suppression can name it.
SANITIZE_NO_LEAK_CHECK = ^run\.topology$$
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -G Ninja -DTILEDIST_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-Og -g1 -DNDEBUG" $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	rm -rf $(SANITIZE_LOGS) && mkdir -p $(SANITIZE_LOGS)
	$(SANITIZE_ENV) ASAN_OPTIONS=$(SANITIZE_ASAN) \
	  ctest --test-dir $(SANITIZE_BUILD) --output-on-failure --timeout 900 -j $(JOBS) -E '$(SANITIZE_NO_LEAK_CHECK)'; \
	status=$$?; \
	$(SANITIZE_ENV) ASAN_OPTIONS=$(SANITIZE_ASAN):detect_leaks=0 \
	  ctest --test-dir $(SANITIZE_BUILD) --output-on-failure --timeout 900 -R '$(SANITIZE_NO_LEAK_CHECK)' || status=1; \
	reports=$$(grep -lE 'ERROR: (Address|Leak)Sanitizer|runtime error:' $(SANITIZE_LOGS)/* 2>/dev/null); \
	for f in $$reports; do echo "== $$f"; cat $$f; done; \
	[ $$status -eq 0 ] && [ -z "$$reports" ]

# The style (.clang-format): `format` rewrites every C++ file, `format-check` (CI) fails on one
# that differs. `tidy-changed` runs clang-tidy (.clang-tidy) over the C++ sources the last
# commit changed, with the build's compile commands (reports; fails only on clang-tidy errors).
# About 35 s a file on CI's 2 cores: at most TIDY_MAX of them, JOBS at a time.
TIDY_MAX ?= 12
CXX_FILES = $$(git ls-files '*.cpp' '*.h')
format: deps
	clang-format-19 -i $(CXX_FILES)
format-check: deps
	@clang-format-19 --dry-run -Werror $(CXX_FILES) && echo "format: every C++ file as .clang-format has it"
tidy-changed: build
	@files=$$(git diff --name-only --diff-filter=AM HEAD~1 -- '*.cpp' 2>/dev/null | while read f; do \
	  grep -q "\"file\": \"[^\"]*/$$f\"" $(BUILD)/compile_commands.json && echo $$f; done | head -$(TIDY_MAX)); \
	if [ -z "$$files" ]; then echo "tidy: no C++ source changed in the last commit"; exit 0; fi; \
	echo "tidy: $$files"; echo $$files | xargs -n 1 -P $(JOBS) clang-tidy-19 -p $(BUILD) --quiet

demo: build
	$(BUILD)/tools/tiledist-demo
	@echo
	@echo "distributed kernels, 4 ranks as processes on this machine (tiledist-run -n 4), on the CPU backend, then on the GPUs where there are:"
	TILEDIST_GPU_HEAP_SIZE=64M $(BUILD)/tools/tiledist-run -n 4 --timeout 300 $(BUILD)/tools/tiledist-dist-demo

bench: build
	$(BUILD)/bench/compile_bench
	$(BUILD)/bench/warmup_bench
	$(BUILD)/bench/elementwise_bench
	$(BUILD)/bench/gemm_bench
	$(BUILD)/bench/profile_bench
	$(BUILD)/bench/moe_bench

# A relocatable tarball for machines with only a GPU driver: the library (LLVM inside), tools,
# tests and benchmarks, with the shared libraries they need beside libtiledist.so; and the
# examples, built by find_package against the build installed into a scratch prefix (as another
# project builds them), each finding the bundle's library by its run path.
BUNDLE_DIR := $(BUILD)/bundle/tiledist
bundle: build
	rm -rf $(BUILD)/bundle && mkdir -p $(BUNDLE_DIR)/tools $(BUNDLE_DIR)/tests $(BUNDLE_DIR)/bench $(BUNDLE_DIR)/examples dist
	cmake --install $(BUILD) --prefix $(abspath $(BUILD))/bundle/prefix > /dev/null
	for ex in examples/*/; do n=$$(basename $$ex); \
	  cmake -S $$ex -B $(BUILD)/bundle/examples/$$n -G Ninja -DCMAKE_PREFIX_PATH=$(abspath $(BUILD))/bundle/prefix \
	    -DCMAKE_BUILD_RPATH='$$ORIGIN/..' > /dev/null && cmake --build $(BUILD)/bundle/examples/$$n > /dev/null && \
	  cp $(BUILD)/bundle/examples/$$n/$$n $(BUNDLE_DIR)/examples/ || exit 1; \
	  if [ -f $$ex/RANKS ]; then cp $$ex/RANKS $(BUNDLE_DIR)/examples/$$n.ranks; fi; done
	cp -d $(BUILD)/libtiledist.so* $(BUNDLE_DIR)/
	cp $(BUILD)/tools/tiledist-* $(BUNDLE_DIR)/tools/
	cp $(BUILD)/tests/*_test $(BUILD)/tests/cache_probe $(BUILD)/tests/dist_faults $(BUNDLE_DIR)/tests/
	find $(BUILD)/bench -maxdepth 1 -type f -executable -exec cp {} $(BUNDLE_DIR)/bench/ \;
	for f in $$(ldd $(BUNDLE_DIR)/libtiledist.so $(BUNDLE_DIR)/bench/* $(BUNDLE_DIR)/tools/* | \
	    grep -oE '/[^ ]*lib(benchmark|hwloc|zstd|z|udev)\.so[^ ]*' | sort -u); do cp -L $$f $(BUNDLE_DIR)/; done
	strip --strip-unneeded $$(readlink -f $(BUNDLE_DIR)/libtiledist.so) $(BUNDLE_DIR)/tools/* $(BUNDLE_DIR)/tests/* \
	  $(BUNDLE_DIR)/bench/* $$(find $(BUNDLE_DIR)/examples -type f -executable)
	# (written beside and moved into place: a run that carries dist/ meanwhile takes the old one whole)
	tar -C $(BUILD)/bundle -cJf dist/.tiledist-bundle.tar.xz.part tiledist
	mv dist/.tiledist-bundle.tar.xz.part dist/tiledist-bundle.tar.xz
	@ls -la dist/tiledist-bundle.tar.xz

clean:
	rm -rf $(BUILD)
