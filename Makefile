# dsr1 - one plain Makefile. `make help` lists the targets.
#
# Sources are found by wildcard, so adding a file to core/, convert/,
# backends/cpu/, cli/ or tests/ needs no edit here. Files named *_avx512.c
# are compiled with AVX-512 flags and must only be entered after a runtime
# CPU check (the binary runs on any x86-64).

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
PKGS    := libcjson libzstd libcurl libcrypto libedit numa
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -ldnnl -lm -ldl -pthread
LDFLAGS += $(SAN)

# Optional GPU toolchains (CUDA=0 / HIP=0 force them off).
NVCC    ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
HIPCC   ?= $(shell command -v hipcc 2>/dev/null)
CUDA    ?= $(if $(NVCC),1,0)
HIP     ?= $(if $(HIPCC),1,0)

LIB_SRC  := $(wildcard core/*.c convert/*.c backends/*.c backends/cpu/*.c)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(filter-out tests/gen_%.c,$(wildcard tests/*.c))
TOOL_SRC := $(wildcard tests/gen_*.c)
PROMPTS  := $(sort $(wildcard prompts/*))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/embedded.o
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TOOLS    := $(TOOL_SRC:tests/%.c=$(BUILD)/%)

# The binary is ./dsr1 for the default tree; another BUILD tree (clang,
# sanitizers) links its own copy inside that tree so ./dsr1 is never replaced.
BIN     := $(if $(filter build,$(BUILD)),dsr1,$(BUILD)/dsr1)

all: deps-ok $(BIN) gpu-summary

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
	$(CC) $(CFLAGS) $(if $(findstring _avx512,$<),$(AVX512)) -MMD -MP -c $< -o $@

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

test: deps-ok $(BIN) $(BUILD)/dsr1-test $(TOOLS)
	@DSR1=$(abspath $(BIN)) BUILD=$(abspath $(BUILD)) $(BUILD)/dsr1-test $(T)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer, in its own tree.
check: deps-ok
	$(MAKE) BUILD=build-san OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    build-san/dsr1-test build-san/dsr1 $(patsubst $(BUILD)/%,build-san/%,$(TOOLS))
	ASAN_OPTIONS=detect_leaks=1 DSR1_SANITIZED=1 DSR1=$(abspath build-san/dsr1) BUILD=$(abspath build-san) build-san/dsr1-test $(T)

demo: deps-ok $(BIN) $(TOOLS)
	@sh tools/demo.sh

bench: deps-ok $(BIN) $(TOOLS)
	@sh tools/bench.sh

install: dsr1
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 755 dsr1 $(DESTDIR)$(PREFIX)/bin/dsr1
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(PREFIX)/share/man/man5/

# Objects wait for the package check (order-only), so `make -j` on a fresh
# machine installs the headers before the first compile needs them.
deps-ok: $(BUILD)/.deps-ok
$(BUILD)/.deps-ok: tools/deps.sh
	@sh tools/deps.sh
	@mkdir -p $(BUILD) && touch $@

gpu-summary:
	@echo "dsr1 $(VERSION): CPU ✓  CUDA $(if $(filter 1,$(CUDA)),✓ (nvcc found; no kernels yet),✗)  HIP $(if $(filter 1,$(HIP)),✓ (hipcc found; no kernels yet),✗)"

clean:
	rm -rf build build-san build-clang dsr1

help:
	@echo "make          build ./dsr1"
	@echo "make test     build and run the test suite (T=substring filters tests)"
	@echo "make check    the test suite under ASan + UBSan"
	@echo "make demo     convert the bundled demo checkpoint and run prompts on it"
	@echo "make bench    benchmarks (tokenizer, convert, decode/prefill)"
	@echo "make install  PREFIX=/usr/local: binary and man pages"
	@echo "options: CUDA=0 HIP=0 CC=clang OPT=-O3"

.PHONY: all test check demo bench install deps-ok gpu-summary clean help
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
