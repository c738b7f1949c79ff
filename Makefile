# dsr1 - one plain Makefile. `make help` lists the targets.
#
# Sources are found by wildcard, so adding a file to core/, convert/,
# backends/cpu/, cli/ or tests/ needs no edit here. Files named *_avx512.c
# are compiled with AVX-512 flags, *_avx2.c with AVX2, FMA and F16C; both
# must only be entered after a runtime CPU check (the binary runs on any
# x86-64).

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
OPT     ?= -O2
SAN     ?=
VERSION := 0.1.0

WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
# snprintf truncation is deliberate (one-line messages, bounded buffers).
WARN    += $(shell $(CC) -Werror -Wno-format-truncation -x c -c /dev/null -o /dev/null 2>/dev/null && echo -Wno-format-truncation)
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -pthread -fno-strict-aliasing $(SAN) \
           -DDSR1_VERSION='"$(VERSION)"' -I. -I$(BUILD)
AVX512  := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni -mfma -mf16c -mavx2
AVX2    := -mavx2 -mfma -mf16c
PKGS    := libcjson libzstd libcurl libcrypto libedit numa
# oneDNN (libdnnl-dev): the fast mode's prefill GEMM (backends/cpu/matmul_dnnl.c).
# Debian builds it with OpenMP; -lgomp because matmul_dnnl.c sets the
# calling thread's OpenMP thread count (one per dsr1 pool thread).
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -ldnnl -lgomp -lm -ldl -pthread
LDFLAGS += $(SAN)

# Optional GPU toolchains (CUDA=0 / HIP=0 force them off).
NVCC    ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
HIPCC   ?= $(shell command -v hipcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
# HIP is opt-in (`make HIP=1`): hipcc takes about ten minutes on 2 cores.
HIP     ?= 0

LIB_SRC  := $(wildcard core/*.c convert/*.c backends/*.c backends/cpu/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(filter-out tests/gen_%.c,$(wildcard tests/*.c))
TOOL_SRC := $(wildcard tests/gen_*.c)
PROMPTS  := $(sort $(wildcard prompts/*))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/embedded.o
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TOOLS    := $(TOOL_SRC:tests/%.c=$(BUILD)/%)

# GPU backends: shared libraries the registry dlopens at run time (next to
# the binary, then $(PREFIX)/lib/dsr1), never linked into dsr1. Built by
# `make` / `make cuda` / `make hip` when the compiler is found; `make test`
# does not wait for them (nvcc takes minutes on 2 cores).
CUDA_SRC  := $(wildcard backends/cuda/*.cu)
CUDA_HDR  := $(wildcard backends/cuda/*.h backends/cuda/*.cuh) backends/backend.h
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
NVFLAGS   ?= -std=c++17 -O3 -I. -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra -Werror all-warnings
# gfx942 (MI300X) needs clang >= 17 (ROCm >= 5.7); Debian 12's hipcc 5.2
# knows gfx940 at most, so that is what it gets.
HIP_MI300 := $(if $(filter 1,$(HIP)),$(shell echo | $(HIPCC) -x hip --offload-arch=gfx942 -fsyntax-only - >/dev/null 2>&1 && echo gfx942 || echo gfx940))
HIP_ARCH  ?= --offload-arch=gfx90a --offload-arch=$(HIP_MI300)
HIPFLAGS  ?= -std=c++17 -O3 -I. -fPIC -fvisibility=hidden -Wall -Wextra -Werror -DDSR1_HIP -x hip
# Built in $(BUILD)/ (next to the test runner) and copied next to $(BIN).
GPU_DIR    = $(patsubst %/,%,$(dir $(BIN)))
GPU_NAMES := $(if $(filter 1,$(CUDA)),libdsr1-cuda.so) $(if $(filter 1,$(HIP)),libdsr1-hip.so)
GPU_LIBS   = $(sort $(GPU_NAMES:%=$(BUILD)/%) $(GPU_NAMES:%=$(GPU_DIR)/%))

# The binary is ./dsr1 for the default tree; another BUILD tree (clang,
# sanitizers) links its own copy inside that tree so ./dsr1 is never replaced.
BIN     := $(if $(filter build,$(BUILD)),dsr1,$(BUILD)/dsr1)

all: deps-ok $(BIN) $(GPU_LIBS) $(if $(filter 1,$(CUDA)),$(BUILD)/cuda-host-check) gpu-summary

$(BIN): $(BUILD)/cli/main.o $(BUILD)/libdsr1cli.a $(BUILD)/libdsr1.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Everything of cli/ but main(), so tests can link the CLI's modules.
$(BUILD)/libdsr1cli.a: $(filter-out $(BUILD)/cli/main.o,$(CLI_OBJ))
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libdsr1.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c | $(BUILD)/embedded.h $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(if $(findstring _avx512,$<),$(AVX512) $(AVX512_EXTRA)) $(if $(findstring _avx2.c,$<),$(AVX2)) -MMD -MP -c $< -o $@

# Prompts and templates are embedded by a small C embedder built first.
$(BUILD)/embed: tools/embed.c | $(BUILD)/.deps-ok
	@mkdir -p $(BUILD)
	$(CC) -std=c11 -O1 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/embedded.c $(BUILD)/embedded.h: $(BUILD)/embed $(PROMPTS)
	$(BUILD)/embed $(BUILD)/embedded.c $(BUILD)/embedded.h $(PROMPTS)
$(BUILD)/embedded.o: $(BUILD)/embedded.c
	$(CC) $(CFLAGS) -c $< -o $@

# Test runner: tests/*.c declare DSR1_TEST(name); the list is generated.
$(BUILD)/test_list.h: $(TEST_SRC)
	@mkdir -p $(BUILD)
	@grep -ho '^DSR1_TEST([a-z0-9_]*)' $(TEST_SRC) | sed 's/DSR1_TEST(\(.*\))/T(\1)/' > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/tests/run.o: $(BUILD)/test_list.h
$(BUILD)/dsr1-test: $(TEST_OBJ) $(BUILD)/libdsr1cli.a $(BUILD)/libdsr1.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/gen_%: tests/gen_%.c $(BUILD)/libdsr1.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets (tests/fuzz/fuzz_<name>.c, one per parser of outside data).
# `make test` replays each over tests/fuzz/corpus/<name>/ through a small
# driver built with the normal compiler; `make fuzz` builds them with clang
# -fsanitize=fuzzer,address,undefined and runs each for FUZZ_TIME seconds.
# The *_avx512.c kernels are built there without instrumentation (no parser
# reaches them, and instrumented they take a quarter of an hour to compile).
FUZZ_SRC    := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=%)
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ_TIME   ?= 60
FUZZ_TARGETS ?= $(FUZZ_NAMES)
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz.h $(BUILD)/libdsr1cli.a $(BUILD)/libdsr1.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)
$(BUILD)/libfuzzer/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(BUILD)/libdsr1cli.a $(BUILD)/libdsr1.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $(filter %.c %.a,$^) $(LDLIBS)

fuzz:
	@sh tools/deps.sh fuzz
	$(MAKE) BUILD=build-fuzz CC=clang OPT=-O1 AVX512_EXTRA="-fno-sanitize=all" \
	    SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    $(FUZZ_TARGETS:%=build-fuzz/libfuzzer/fuzz_%)
	@sh tools/fuzz.sh build-fuzz $(FUZZ_TIME) $(FUZZ_TARGETS)

# A GPU library already next to the binary is rebuilt first: a stale one
# (an older seam version) would be refused, and the backend tests would
# test the refusal; a tree without one (CI) does not build it for the tests.
test: deps-ok $(BIN) $(BUILD)/dsr1-test $(TOOLS) $(FUZZ_REPLAY) $(if $(filter 1,$(CUDA)),$(BUILD)/cuda-host-check) \
      $(if $(wildcard $(GPU_DIR)/libdsr1-cuda.so $(GPU_DIR)/libdsr1-hip.so),$(GPU_LIBS))
	@DSR1=$(abspath $(BIN)) BUILD=$(abspath $(BUILD)) $(BUILD)/dsr1-test $(T)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own
# tree: build-san, or build-san-clang for `make check CC=clang` (so objects of
# the two compilers never mix).
BUILD_SAN ?= $(if $(findstring clang,$(notdir $(CC))),build-san-clang,build-san)
check: deps-ok
	$(MAKE) BUILD=$(BUILD_SAN) OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    $(BUILD_SAN)/dsr1-test $(BUILD_SAN)/dsr1 $(patsubst $(BUILD)/%,$(BUILD_SAN)/%,$(TOOLS) $(FUZZ_REPLAY))
	ASAN_OPTIONS=detect_leaks=1 DSR1_SANITIZED=1 DSR1=$(abspath $(BUILD_SAN)/dsr1) BUILD=$(abspath $(BUILD_SAN)) $(BUILD_SAN)/dsr1-test $(T)

demo: deps-ok $(BIN) $(TOOLS)
	@sh tools/demo.sh

bench: deps-ok $(BIN) $(TOOLS)
	@sh tools/bench.sh

# dsr1 vs llama.cpp / ik_llama.cpp: LLAMA_SRC=... IK_SRC=... (tools/bench_peer.sh)
bench-peer: deps-ok $(BIN) $(TOOLS)
	@BUILD=$(BUILD) sh tools/bench_peer.sh

install: dsr1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 dsr1 $(DESTDIR)$(PREFIX)/bin/dsr1
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(PREFIX)/share/man/man5/
	for l in $(wildcard libdsr1-cuda.so libdsr1-hip.so); do \
	    install -D -m 755 $$l $(DESTDIR)$(PREFIX)/lib/dsr1/$$l; done

# Objects wait for the package check (order-only), so `make -j` on a fresh
# machine installs the headers before the first compile needs them.
deps-ok: $(BUILD)/.deps-ok
$(BUILD)/.deps-ok: tools/deps.sh
	@sh tools/deps.sh
	@mkdir -p $(BUILD) && touch $@

$(BUILD)/cuda/%.o: backends/cuda/%.cu $(CUDA_HDR) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(CUDA_ARCH) -c $< -o $@
# cudart linked statically: the library needs only the driver (libcuda.so.1).
$(BUILD)/libdsr1-cuda.so: $(CUDA_SRC:backends/cuda/%.cu=$(BUILD)/cuda/%.o)
	$(NVCC) -shared -cudart static $(CUDA_ARCH) -Xlinker --no-undefined -o $@ $^ -ldl -lrt -lpthread
$(BUILD)/hip/%.o: backends/cuda/%.cu $(CUDA_HDR) | $(BUILD)/.deps-ok
	@mkdir -p $(dir $@)
	$(HIPCC) $(HIPFLAGS) $(HIP_ARCH) -c $< -o $@
$(BUILD)/libdsr1-hip.so: $(CUDA_SRC:backends/cuda/%.cu=$(BUILD)/hip/%.o)
	$(HIPCC) -shared $(HIP_ARCH) -o $@ $^
ifneq ($(BUILD),$(patsubst %/,%,$(dir $(BIN))))
$(patsubst %/,%,$(dir $(BIN)))/libdsr1-%.so: $(BUILD)/libdsr1-%.so
	cp $< $@
endif
# The CUDA code's host-checkable part (conversions, decoders, rounding
# points, router) run on the CPU against the CPU's definitions: no GPU.
$(BUILD)/cuda-host-check: tests/cuda_host_check.cu $(CUDA_HDR) $(BUILD)/libdsr1.a
	$(NVCC) -std=c++17 -O1 -I. -Xcompiler -Wall,-Wextra,-ffp-contract=off -Werror all-warnings -cudart static \
	    -o $@ $< $(BUILD)/libdsr1.a $(filter-out -pthread,$(LDLIBS)) -lpthread -lrt
cuda: $(BUILD)/libdsr1-cuda.so $(GPU_DIR)/libdsr1-cuda.so
hip: $(BUILD)/libdsr1-hip.so $(GPU_DIR)/libdsr1-hip.so

gpu-summary:
	@echo "dsr1 $(VERSION): CPU ✓  CUDA $(if $(filter 1,$(CUDA)),✓ ($(GPU_DIR)/libdsr1-cuda.so; untested on a GPU),✗)  HIP $(if $(filter 1,$(HIP)),✓ ($(GPU_DIR)/libdsr1-hip.so; untested on a GPU),✗$(if $(HIPCC), (hipcc found: make HIP=1)))"

clean:
	rm -rf build build-san build-san-clang build-clang build-fuzz dsr1 libdsr1-cuda.so libdsr1-hip.so

help:
	@echo "make          build ./dsr1"
	@echo "make test     build and run the test suite (T=substring filters tests)"
	@echo "make check    the test suite under ASan + UBSan (CC=clang: with clang, in build-san-clang)"
	@echo "make fuzz     run each fuzz target FUZZ_TIME s (default 60; FUZZ_TARGETS=name... picks)"
	@echo "make demo     convert the bundled demo checkpoint and run prompts on it"
	@echo "make bench    benchmarks (tokenizer, convert, decode/prefill)"
	@echo "make bench-peer LLAMA_SRC=DIR IK_SRC=DIR   dsr1 vs llama.cpp, ik_llama.cpp"
	@echo "make install  PREFIX=/usr/local: binary and man pages"
	@echo "make cuda     only the CUDA backend library (libdsr1-cuda.so next to dsr1)"
	@echo "make hip      only the HIP backend library (needs hipcc)"
	@echo "options: CUDA=0 HIP=0 CC=clang OPT=-O3"

.PHONY: all test check fuzz demo bench bench-peer install deps-ok gpu-summary clean help cuda hip
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
