# ogakit build. Modules are lib/<mod>/*.c, each archived as $(BUILD)/lib/<mod>.a; programs are
# bin/<prog>.c linked against the modules listed in MODS_<prog> (high level first). Unit tests are
# t/unit/<mod>_<name>.c, linked against MODS_UNIT_<mod> (default: <mod> util).
#   make            build everything into build/
#   make check      build, then run every C unit test and bats file: "N passed, N failed"
#   make check SAN=1  the same with ASan+UBSan, in build/san
#   make check SAN=both  the plain run and the SAN=1 run in one queue, the SAN=1 build its first job (CI: .ci/run)
#   make check JOBS=1 one test file at a time (default: one per CPU, at most 4; output whole and in order)
#   make demo       the main job on the bundled default model
#   make install PREFIX=/usr/local
SAN ?= 0
JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
ifeq ($(SAN),1)
BUILD ?= build/san
# -fno-var-tracking: the sanitizers' reports keep file and line; without it GCC 12 spends half of the build
# tracking variable locations through the unrolled SIMD tiles (kern_avx512.c alone: 264 s, 130 s without)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -fno-var-tracking
else
BUILD ?= build
SANFLAGS =
endif
PREFIX ?= /usr/local
CC ?= gcc
OPT ?= -O2
CFLAGS_BASE = -std=gnu11 $(OPT) -g -Wall -Wextra -Werror -pthread -Ilib -I$(BUILD)/gen \
  $(shell pkg-config --cflags libdrm 2>/dev/null) $(SANFLAGS)
LDFLAGS = $(SANFLAGS)

# per-file ISA flags (files named *_avx2.c, *_avx512.c, *_vbmi.c, *_amx.c): the only place that knows about
# instruction sets. Which of them runs is chosen once at run time from cpuid by lib/kern/isa.c, the ISA
# table. (lib/util/crc32c.c checks for the SSE4.2 crc32 instruction on its own: a checksum, exact on
# either path, below the kernels' layer.)
AVX2_FLAGS = -mavx2 -mfma -mf16c -mbmi2
AVX512_FLAGS = $(AVX2_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16
VBMI_FLAGS = $(AVX512_FLAGS) -mavx512vbmi
AMX_FLAGS = $(VBMI_FLAGS) -mgfni -mamx-tile -mamx-int8

# modules each program links (dependencies after dependents)
MODS_oga-info    = pack mdesc tok onnx util
MODS_oga-extract = pack ogax mdesc tok q4nx onnx util
MODS_q4nx-pack   = q4nx ogax mdesc tok util
MODS_q4nx-verify = verify kern q4nx pack ogax mdesc tok onnx util
MODS_q4nx-gguf   = gguf q4nx mdesc tok util
MODS_npu-gemm    = kern npu q4nx util
MODS_npu-forward = serve app model mdesc tok kern q4nx util
MODS_spec-replay = spec app model mdesc tok kern q4nx util
MODS_UNIT_spec   = spec util
MODS_UNIT_util   = util
MODS_UNIT_q4nx   = ogax mdesc tok q4nx util
MODS_UNIT_ogax   = ogax mdesc tok util
MODS_UNIT_gguf   = gguf q4nx mdesc tok util
MODS_UNIT_kern   = kern q4nx util
MODS_UNIT_npu    = npu util
MODS_UNIT_model  = model mdesc tok kern q4nx util
MODS_UNIT_mdesc  = mdesc tok util
MODS_UNIT_pack   = pack mdesc tok onnx util
MODS_UNIT_app    = app model mdesc tok kern q4nx util
MODS_UNIT_serve  = serve tok util

# external libraries: each module's, and a program's own (LIBS_<prog>); a program links the union of
# its modules' and its own, so nothing links a library it does not use
LIBS_util = -ljansson -lm
LIBS_q4nx = -ljansson
LIBS_ogax = -ljansson
LIBS_onnx = -lprotobuf-c
LIBS_pack = -lprotobuf-c -ljansson
LIBS_npu  = -ldrm -ljansson
LIBS_tok  = -lpcre2-8 -lutf8proc -ljansson
LIBS_mdesc = -ljansson
LIBS_app  = -ljansson
LIBS_verify = -lprotobuf-c -ljansson -lm
LIBS_gguf = -ljansson -lm
LIBS_spec = -lcurl -ljansson -lm
LIBS_serve = -lmicrohttpd -ljansson -lm
LIBS_kern = -lm -ljansson
LIBS_model = -lm -ljansson
# the server (npu-forward serve) and spec-replay's HTTP drafter client
LIBS_npu-forward = -lmicrohttpd -lcurl
LIBS_spec-replay = -lmicrohttpd -lcurl
uniq = $(if $(1),$(firstword $(1)) $(call uniq,$(filter-out $(firstword $(1)),$(1))))
libs_for = $(call uniq,$(LIBS_$(1)) $(foreach m,$(2),$(LIBS_$(m)))) -pthread

PROGS := $(patsubst bin/%.c,%,$(wildcard bin/*.c))
MODULES := $(filter-out onnx,$(notdir $(wildcard lib/*)))
UNITS := $(patsubst t/unit/%.c,%,$(wildcard t/unit/*.c))

# test tools: standalone C in t/ that is deliberately independent of lib/ (libc and libm only)
TTOOLS := forward-compare
all: $(addprefix $(BUILD)/bin/,$(PROGS)) $(addprefix $(BUILD)/t/,$(UNITS)) $(addprefix $(BUILD)/ttools/,$(TTOOLS))

.SECONDEXPANSION:
.SECONDARY:

# lib/onnx: generated at build time from the system's onnx.proto, never hand-written
ONNX_PROTO ?= /usr/include/onnx/onnx.proto
# one recipe, two files: a grouped target (&:), so a parallel build runs protoc-c once
$(BUILD)/gen/onnx/onnx.pb-c.c $(BUILD)/gen/onnx/onnx.pb-c.h &: $(ONNX_PROTO)
	@mkdir -p $(BUILD)/gen/onnx
	protoc-c --c_out=$(BUILD)/gen/onnx -I$(dir $(ONNX_PROTO)) $(ONNX_PROTO)
$(BUILD)/obj/onnx/onnx.pb-c.o: $(BUILD)/gen/onnx/onnx.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -Wno-unused-parameter -c -o $@ $<
$(BUILD)/lib/onnx.a: $(BUILD)/obj/onnx/onnx.pb-c.o $(patsubst lib/onnx/%.c,$(BUILD)/obj/onnx/%.o,$(wildcard lib/onnx/*.c))
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# every module's objects depend on the generated header so any module may include it
GEN_HDR = $(BUILD)/gen/onnx/onnx.pb-c.h

$(BUILD)/obj/%.o: lib/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(ISA) -MMD -MP -c -o $@ $<
$(BUILD)/obj/%_avx2.o: ISA = $(AVX2_FLAGS)
$(BUILD)/obj/%_avx512.o: ISA = $(AVX512_FLAGS)
$(BUILD)/obj/%_vbmi.o: ISA = $(VBMI_FLAGS)
$(BUILD)/obj/%_amx.o: ISA = $(AMX_FLAGS)
# SAN=1: the kernel files of instruction sets this machine's CPU lacks (/proc/cpuinfo) cannot run here, so
# they are compiled without the sanitizers (ASan+UBSan on the AVX-512 tiles is most of the sanitizer build's
# time); on a CPU that has them they are instrumented like every other file. build/san is for this machine.
ifeq ($(SAN),1)
CPU_FLAGS := $(shell grep -m1 '^flags' /proc/cpuinfo 2>/dev/null)
cpu_has = $(if $(strip $(foreach f,$(1),$(if $(filter $(f),$(CPU_FLAGS)),,missing))),,yes)
ifneq ($(call cpu_has,avx2 fma f16c bmi2),yes)
$(BUILD)/obj/%_avx2.o: SANFLAGS =
endif
ifneq ($(call cpu_has,avx2 fma f16c bmi2 avx512f avx512bw avx512vl avx512dq avx512_vnni),yes)
$(BUILD)/obj/%_avx512.o: SANFLAGS =
endif
ifneq ($(call cpu_has,avx2 fma f16c bmi2 avx512f avx512bw avx512vl avx512dq avx512_vnni avx512vbmi),yes)
$(BUILD)/obj/%_vbmi.o: SANFLAGS =
endif
ifneq ($(call cpu_has,avx2 fma f16c bmi2 avx512f avx512bw avx512vl avx512dq avx512_vnni avx512vbmi gfni amx_tile amx_int8),yes)
$(BUILD)/obj/%_amx.o: SANFLAGS =
endif
endif

define module_rule
$(BUILD)/lib/$(1).a: $(patsubst lib/$(1)/%.c,$(BUILD)/obj/$(1)/%.o,$(wildcard lib/$(1)/*.c))
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach m,$(MODULES),$(eval $(call module_rule,$(m))))

# a program is bin/<prog>.c plus, when it has subcommands of its own, the files in bin/<prog>/
prog_objs = $(patsubst bin/%.c,$(BUILD)/obj/bin/%.o,$(wildcard bin/$(1)/*.c))
$(BUILD)/obj/bin/%.o: bin/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -MMD -MP -c -o $@ $<
$(BUILD)/bin/%: bin/%.c $(GEN_HDR) $$(call prog_objs,$$*) $$(foreach m,$$(MODS_$$*),$(BUILD)/lib/$$(m).a)
	@mkdir -p $(dir $@) $(BUILD)/obj/bin
	$(CC) $(CFLAGS_BASE) -MMD -MP -MF $(BUILD)/obj/bin/$*.d -o $@ $< $(call prog_objs,$*) $(foreach m,$(MODS_$*),$(BUILD)/lib/$(m).a) $(LDFLAGS) $(call libs_for,$*,$(MODS_$*))

unit_mods = $(or $(MODS_UNIT_$(firstword $(subst _, ,$(1)))),$(firstword $(subst _, ,$(1))) util)
$(BUILD)/t/%: t/unit/%.c $(wildcard t/unit/*.h) $(GEN_HDR) $$(foreach m,$$(call unit_mods,$$*),$(BUILD)/lib/$$(m).a)
	@mkdir -p $(dir $@) $(BUILD)/obj/t
	$(CC) $(CFLAGS_BASE) -MMD -MP -MF $(BUILD)/obj/t/$*.d -o $@ $< $(foreach m,$(call unit_mods,$*),$(BUILD)/lib/$(m).a) $(LDFLAGS) $(call libs_for,,$(call unit_mods,$*))

# test tools (t/forward-compare.c): test code, not the code under test, so never sanitized (SAN=1 would
# only slow the comparisons of the parity gates)
$(BUILD)/ttools/%: t/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O3 -march=native -fopenmp-simd -g -Wall -Wextra -Werror -o $@ $< -lm

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# the modules the fuzz targets link (here and in `make fuzz` below)
FUZZ_MODS = app serve spec model pack ogax mdesc tok kern q4nx util
# the fuzz targets built without libFuzzer (t/fuzz-replay.c's main), for t/fuzz-regress.bats
FUZZ_REPLAY = $(patsubst fuzz/%.c,$(BUILD)/fuzz-replay/%,$(wildcard fuzz/*.c))
$(BUILD)/fuzz-replay/%: fuzz/%.c fuzz/fuzz.h t/fuzz-replay.c $(GEN_HDR) $(foreach m,$(FUZZ_MODS) onnx,$(BUILD)/lib/$(m).a)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) -o $@ $< t/fuzz-replay.c $(foreach m,$(FUZZ_MODS) onnx,$(BUILD)/lib/$(m).a) $(LDFLAGS) $(call libs_for,,$(FUZZ_MODS) onnx)

ifeq ($(SAN),both)
# the plain tests, then the same under ASan+UBSan, in one queue (t/run.sh's OGAKIT_SAN_BUILD): the sanitizer
# build runs as the queue's first job beside the plain files (one compiler, one test file), and the
# sanitizer files start beside the plain run's last ones instead of after them
check:
	@$(MAKE) --no-print-directory SAN=0 check-build
	@OGAKIT_BUILD=$(abspath build) OGAKIT_SAN_BUILD=$(abspath build/san) OGAKIT_SAN=0 OGAKIT_TEST_JOBS=$(JOBS) \
	  OGAKIT_SAN_PREP='$(MAKE) --no-print-directory -j1 SAN=1 check-build' bash t/run.sh $(TESTS)
else
check: check-build
	@OGAKIT_BUILD=$(abspath $(BUILD)) OGAKIT_SAN=$(SAN) OGAKIT_TEST_JOBS=$(JOBS) bash t/run.sh $(TESTS)
endif

check-build: all $(FUZZ_REPLAY)

demo: all
	@OGAKIT_BUILD=$(abspath $(BUILD)) bash tools/demo.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/ogakit
	install -m 755 $(addprefix $(BUILD)/bin/,$(PROGS)) $(DESTDIR)$(PREFIX)/bin/
	install -m 755 tools/oga_pack_probe.sh $(DESTDIR)$(PREFIX)/bin/oga_pack_probe
	for f in man/man1/*.1; do [ -e "$$f" ] && install -m 644 "$$f" $(DESTDIR)$(PREFIX)/share/man/man1/; done; true
	for f in man/man5/*.5; do [ -e "$$f" ] && install -m 644 "$$f" $(DESTDIR)$(PREFIX)/share/man/man5/; done; true
	cp -R share/. $(DESTDIR)$(PREFIX)/share/ogakit/

clean:
	rm -rf $(BUILD)

.PHONY: all check check-build demo install clean

# ---- fuzzing: `make fuzz` (not part of all/check; needs clang-14 + libclang-rt-14-dev), see fuzz/README.
# The readers' modules are rebuilt with clang and the fuzzer/ASan/UBSan instrumentation into
# $(BUILD)/fuzz/; each fuzz/<name>.c becomes the libFuzzer binary $(BUILD)/fuzz/<name>.
FUZZ_CC ?= clang-14
FUZZ_SAN = -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -pthread -Ilib -I$(BUILD)/gen $(FUZZ_SAN)
FUZZ_OBJS = $(patsubst lib/%.c,$(BUILD)/fuzz/obj/%.o,$(foreach m,$(FUZZ_MODS),$(wildcard lib/$(m)/*.c))) \
  $(BUILD)/fuzz/obj/onnx/onnx.pb-c.o
FUZZ_TARGETS = $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard fuzz/*.c))
$(BUILD)/fuzz/obj/%.o: lib/%.c $(GEN_HDR)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(ISA) -MMD -MP -c -o $@ $<
$(BUILD)/fuzz/obj/%_avx2.o: ISA = $(AVX2_FLAGS)
$(BUILD)/fuzz/obj/%_avx512.o: ISA = $(AVX512_FLAGS)
$(BUILD)/fuzz/obj/%_vbmi.o: ISA = $(VBMI_FLAGS)
$(BUILD)/fuzz/obj/%_amx.o: ISA = $(AMX_FLAGS)
$(BUILD)/fuzz/obj/onnx/onnx.pb-c.o: $(BUILD)/gen/onnx/onnx.pb-c.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -Wno-unused-parameter -c -o $@ $<
$(BUILD)/fuzz/libogk.a: $(FUZZ_OBJS)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz.h $(BUILD)/fuzz/libogk.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/fuzz/libogk.a $(call libs_for,,$(FUZZ_MODS) onnx)
-include $(shell find $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)
fuzz: $(FUZZ_TARGETS)
# replay the inputs of fixed bugs (fuzz/regress/<target>/) through the fuzz build: seconds, no fuzzing
fuzz-regress: $(FUZZ_TARGETS)
	@export OGAKIT_FUZZ_PACK=$${OGAKIT_FUZZ_PACK:-$$(tools/fixture.sh qwen2 cpu tied tiny)}; \
	for d in fuzz/regress/*/; do t=$$(basename $$d); \
	  out=$$($(BUILD)/fuzz/$$t -runs=0 $$d 2>&1) || { echo "$$out" | tail -30; echo "fuzz-regress: $$t FAILED"; exit 1; }; \
	  echo "$$t: $$(echo "$$out" | grep '^Done')"; done
.PHONY: fuzz fuzz-regress
