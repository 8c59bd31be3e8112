# uet: build, install, test and demo. `make help` lists the targets.
#
# `make deps` (run by every build) installs the Debian packages that are
# missing and checks the Rust toolchain. Nothing is installed outside the
# checkout unless PREFIX says so.

PREFIX    ?= $(CURDIR)/install
# Absolute, so FI_PROVIDER_PATH and the scripts work from any directory.
override PREFIX := $(abspath $(PREFIX))
BUILD     := $(CURDIR)/build
CARGO     ?= cargo
CC        ?= cc
MPICC     ?= mpicc
CFLAGS    ?= -O2 -g -Wall -Wextra
LIBDIR    := $(PREFIX)/lib/libfabric
SO        := target/release/libuet_fi.so

export CARGO_TERM_COLOR ?= never

# PGO=1: install the profile-guided provider (`make pgo`) instead of the
# plain release build. `make bench` measures it unless PGO=0 is given.
ifneq ($(filter bench,$(MAKECMDGOALS)),)
PGO       ?= 1
endif
PGO       ?= 0
ifneq ($(filter-out 0 1,$(PGO)),)
$(error PGO must be 0 or 1, not '$(PGO)')
endif
PGO_DIR   := $(CURDIR)/target/pgo
comma     := ,
# The compiler cargo runs; the profile tool must come from its toolchain.
# Evaluated when used: only `make pgo` needs them.
RUSTC     ?= rustc
HOST_TRIPLE = $(shell $(RUSTC) -vV | sed -n 's/^host: //p')
PGO_SO     = $(PGO_DIR)/use/$(HOST_TRIPLE)/release/libuet_fi.so
LLVM_PROFDATA = $(shell $(RUSTC) --print sysroot)/lib/rustlib/$(HOST_TRIPLE)/bin/llvm-profdata
# Settings that would take the profile flags out of cargo's hands
# (CARGO_ENCODED_RUSTFLAGS wins over RUSTFLAGS) or send the profiles
# elsewhere.
PGO_ENV   := env -u CARGO_ENCODED_RUSTFLAGS -u LLVM_PROFILE_FILE RUSTC=$(RUSTC)
# Non-empty when the profile-guided provider is the one installed.
PGO_ON    := $(filter 1,$(PGO))
INSTALL_SO = $(if $(PGO_ON),$(PGO_SO),$(SO))

# Debian packages: libfabric headers/tools and Open MPI for the C tests,
# libclang for bindgen, valgrind for leak runs; python3 and iproute2 (ss)
# are used by fabtests/scripts.
DEB_PKGS  := libfabric-dev libfabric-bin libclang-dev openmpi-bin libopenmpi-dev \
             pkg-config valgrind python3 python3-pip iproute2 python3-matplotlib
# `make bench`: raw-UDP anchors.
DEB_PKGS  += sockperf iperf3

# C programs: every fabtests/functional/*.c, fabtests/matrix/*.c and
# fabtests/mpi/*.c is one program (headers beside them are shared). Absent
# directories build nothing.
MATRIX_SRC := $(wildcard fabtests/matrix/*.c)
MATRIX_HDR := $(wildcard fabtests/matrix/*.h)
MATRIX_BIN := $(patsubst fabtests/matrix/%.c,$(BUILD)/bin/%,$(MATRIX_SRC))
FUNC_SRC  := $(wildcard fabtests/functional/*.c)
MPI_SRC   := $(wildcard fabtests/mpi/*.c)
FUNC_HDR  := $(wildcard fabtests/functional/*.h)
MPI_HDR   := $(wildcard fabtests/mpi/*.h)
FUNC_BIN  := $(patsubst fabtests/functional/%.c,$(BUILD)/bin/%,$(FUNC_SRC))
MPI_BIN   := $(patsubst fabtests/mpi/%.c,$(BUILD)/bin/%,$(MPI_SRC))
SCRIPTS   := $(wildcard fabtests/scripts/*.sh) $(wildcard fabtests/scripts/*.py)
# MPICH for the ch4:ofi runs: its binary wheel on PyPI (Debian's MPICH
# uses ch4:ucx), which brings its own libfabric 2.x; that core then loads
# uet through FI_PROVIDER_PATH. Pinned by version, platform and checksum
# (x86_64 only). MPICH=0 skips those runs (a machine without PyPI).
MPICH         ?= 1
MPICH_VERSION := 5.0.2
MPICH_WHEEL   := mpich-$(MPICH_VERSION)-py3-none-manylinux_2_28_x86_64.whl
MPICH_SHA256  := 8fed465ebff269ea2ebac179a25de02671ddf8df476e0f115be089015015cfd4
MPICH_HOME    := $(BUILD)/mpich/mpich-$(MPICH_VERSION).data/data
MPICH_PROGS   := $(patsubst fabtests/mpi/%.c,$(BUILD)/mpich-bin/%,$(MPI_SRC))
BENCH_SRC := $(wildcard fabtests/bench/*.c)
BENCH_HDR := $(wildcard fabtests/bench/*.h)
BENCH_BIN := $(patsubst fabtests/bench/%.c,$(BUILD)/bin/%,$(BENCH_SRC))

# What selects the freshly installed provider in the test stages.
RUN_ENV   := FI_PROVIDER_PATH=$(LIBDIR) FI_PROVIDER=uet
# What an endpoint on a real network does by default (the auto load
# balancer sprays over the entropy pool in units of one segmented send,
# the auto MTU is one Ethernet frame), forced on loopback: completions
# then come out of order.
SPRAYED   := FI_UET_LB=reps FI_UET_MTU=1472
# Spraying as the papers do (and as through emu-net): a pick per packet,
# so the packets of one message arrive out of order too.
PER_PACKET := FI_UET_SPRAY_BYTES=1
# Injected faults on transmit: 2% loss plus 10% reordering.
LOSSY     := FI_UET_FAULT_DROP=20 FI_UET_FAULT_REORDER=100
# --keep-debuginfo: the provider is dlclose'd before the leak check; its
# symbols are needed to match the suppressions. --fair-sched=yes: with
# valgrind's default lock a thread that spins on memory (close_rebind
# waits so for the progress thread) can keep every other thread out.
VALGRIND  := valgrind -q --fair-sched=yes --error-exitcode=3 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite --keep-debuginfo=yes \
	--suppressions=$(CURDIR)/fabtests/functional/valgrind.supp

# Upper bounds (seconds) that stop a hung stage; typical runs are far shorter.
T_CARGO   := 600
T_FUNC    := 180
T_PP      := 300
T_MPI     := 150
T_BIG     := 180
T_MATRIX  := 120

TEST_STAGES := test-lint test-rust test-discovery test-functional test-pingpong test-mpi test-big test-matrix

.PHONY: all build rust c-progs deps install pgo test $(TEST_STAGES) demo demo-all bench bench-micro bench-nscc lint fmt clean help fuzz

all: build ## Default: deps, the Rust workspace (release) and the C test programs

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 10

deps: ## Install missing Debian packages (apt-get) and check the Rust toolchain
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then \
	    echo "missing Debian packages:$$missing"; \
	    echo "install them as root: apt-get install$$missing"; exit 1; fi; \
	  echo "== installing Debian packages:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "cargo not found. Install Rust stable with rustup:"; \
	  echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"; \
	  echo "then open a new shell (or: . \$$HOME/.cargo/env) and run make again."; \
	  exit 1; }
	@if command -v rustup >/dev/null 2>&1; then \
	  have=$$(rustup component list --installed 2>/dev/null); \
	  for c in clippy rustfmt; do \
	    echo "$$have" | grep -q "^$$c" || rustup component add $$c; done; \
	fi

build: rust c-progs ## deps + cargo build --release --workspace + C programs in build/bin

rust: deps
	$(CARGO) build --release --workspace

c-progs: $(FUNC_BIN) $(MATRIX_BIN) $(MPI_BIN) $(BENCH_BIN)

# `| deps`: the compilers and headers come from the Debian packages.
$(BUILD)/bin/%: fabtests/functional/%.c $(FUNC_HDR) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CURDIR)/include $$(pkg-config --cflags libfabric) -o $@ $< \
	  $$(pkg-config --libs libfabric)

$(BUILD)/bin/%: fabtests/matrix/%.c $(MATRIX_HDR) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CURDIR)/include $$(pkg-config --cflags libfabric) -o $@ $< \
	  $$(pkg-config --libs libfabric)

$(BUILD)/bin/%: fabtests/bench/%.c $(BENCH_HDR) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -pthread -I$(CURDIR)/include $$(pkg-config --cflags libfabric) -o $@ $< \
	  $$(pkg-config --libs libfabric)

$(BUILD)/bin/%: fabtests/mpi/%.c $(MPI_HDR) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -pthread -I$(CURDIR)/include -o $@ $<

# Unpacked beside, then moved into place: an interrupted run leaves no
# half tree that later runs would take for whole.
$(MPICH_HOME)/bin/mpicc: | deps
	@rm -rf $(BUILD)/mpich $(BUILD)/mpich.tmp && mkdir -p $(BUILD)/mpich.tmp
	python3 -m pip download -q --no-deps --only-binary=:all: \
	  --platform manylinux_2_28_x86_64 -d $(BUILD)/mpich.tmp mpich==$(MPICH_VERSION)
	echo "$(MPICH_SHA256)  $(BUILD)/mpich.tmp/$(MPICH_WHEEL)" | sha256sum -c --quiet
	python3 -m zipfile -e $(BUILD)/mpich.tmp/$(MPICH_WHEEL) $(BUILD)/mpich.tmp
	chmod +x $(BUILD)/mpich.tmp/mpich-$(MPICH_VERSION).data/data/bin/*
	mv $(BUILD)/mpich.tmp $(BUILD)/mpich

$(BUILD)/mpich-bin/%: fabtests/mpi/%.c $(MPI_HDR) $(MPICH_HOME)/bin/mpicc
	@mkdir -p $(@D)
	$(MPICH_HOME)/bin/mpicc $(CFLAGS) -pthread -I$(CURDIR)/include -o $@ $<

install: build $(if $(PGO_ON),pgo) ## Install into PREFIX (default ./install; no root needed; PGO=1: the profile-guided provider)
	install -d $(LIBDIR) $(PREFIX)/include/rdma $(PREFIX)/bin
	install -m 0755 $(INSTALL_SO) $(LIBDIR)/libuet-fi.so
	install -m 0644 include/rdma/fi_ext_uet.h $(PREFIX)/include/rdma/
	install -m 0755 target/release/uet-emu $(FUNC_BIN) $(MATRIX_BIN) $(MPI_BIN) $(BENCH_BIN) \
	  $(SCRIPTS) $(PREFIX)/bin/

# Profile-guided optimisation of the provider: build it instrumented
# (target/pgo/gen), run the training of fabtests/scripts/pgo_train.sh over
# it, rebuild it with the merged profile (target/pgo/use). The profile lays
# the hot paths out together and the cold ones aside, which is what a
# per-message path bigger than the instruction cache needs (README,
# "Benchmarks"). --target keeps the flags off build scripts. Ends with a
# data-checked fi_pingpong over the result.
pgo: build ## Build (not install) the profile-guided provider in target/pgo; make install PGO=1 installs it
	@command -v rustup >/dev/null 2>&1 || { \
	  echo "make pgo needs rustup (for its llvm-tools component); make bench PGO=0 measures the plain build"; \
	  exit 1; }
	@rustup component list --installed 2>/dev/null | grep -q '^llvm-tools' || \
	  rustup component add llvm-tools
	@test -x $(LLVM_PROFDATA) || { \
	  echo "no $(LLVM_PROFDATA): the llvm-tools component of the toolchain $(RUSTC) belongs to is missing"; \
	  exit 1; }
	@echo "== PGO [1/3] instrumented provider"
	rm -rf $(PGO_DIR)/profiles $(PGO_DIR)/prefix
	mkdir -p $(PGO_DIR)/profiles $(PGO_DIR)/prefix/lib/libfabric
	$(PGO_ENV) RUSTFLAGS="$$RUSTFLAGS -Cprofile-generate=$(PGO_DIR)/profiles" \
	  $(CARGO) build --release -p uet-fi --target $(HOST_TRIPLE) --target-dir $(PGO_DIR)/gen
	install -m 0755 $(PGO_DIR)/gen/$(HOST_TRIPLE)/release/libuet_fi.so \
	  $(PGO_DIR)/prefix/lib/libfabric/libuet-fi.so
	@echo "== PGO [2/3] training runs"
	$(PGO_ENV) timeout 600 fabtests/scripts/pgo_train.sh $(PGO_DIR)/prefix $(BUILD)/bin
	@ls $(PGO_DIR)/profiles/*.profraw >/dev/null 2>&1 || { \
	  echo "the training runs left no profile in $(PGO_DIR)/profiles"; exit 1; }
	$(LLVM_PROFDATA) merge -o $(PGO_DIR)/uet.profdata $(PGO_DIR)/profiles
	@echo "== PGO [3/3] provider built with the profile"
	$(PGO_ENV) RUSTFLAGS="$$RUSTFLAGS -Cprofile-use=$(PGO_DIR)/uet.profdata" \
	  $(CARGO) build --release -p uet-fi --target $(HOST_TRIPLE) --target-dir $(PGO_DIR)/use
	install -m 0755 $(PGO_SO) $(PGO_DIR)/prefix/lib/libfabric/libuet-fi.so
	timeout $(T_PP) fabtests/scripts/pingpong.sh $(PGO_DIR)/prefix -S all -I 50 -c >/dev/null
	@echo "== PGO: $(PGO_SO)"

# The stages run one after another (also under -j) and the first failure
# stops make.
test: install ## Install, then lint, Rust tests, discovery, C suite, fi_pingpong, MPI, 256 MiB
	@for s in $(TEST_STAGES); do \
	  $(MAKE) --no-print-directory $$s || { echo "== make test: FAILED in $$s"; exit 1; }; done
	@echo "== make test: all stages passed"

test-lint:
	@echo "== [1/7] cargo fmt --check, clippy -D warnings"
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-rust:
	@echo "== [2/7] Rust unit, property and loopback tests"
	# Built first, untimed: the limit is for the tests (a hang), not for a
	# compiler sharing a busy machine.
	$(CARGO) test --workspace --profile release-tests --no-run
	timeout $(T_CARGO) $(CARGO) test --workspace --profile release-tests
	@echo "== the engine and driver tests again with debug assertions"
	$(CARGO) test -p uet --lib --test landing --test lossy_channel --test rendezvous --no-run
	timeout $(T_CARGO) $(CARGO) test -p uet --lib --test landing --test lossy_channel --test rendezvous

# fi_info must list the RDM endpoint and every parameter the public header
# names; the header must compile on its own against the installed libfabric.
test-discovery:
	@echo "== [3/7] provider discovery (fi_info) and fi_ext_uet.h"
	$(RUN_ENV) fi_info -p uet > $(BUILD)/fi_info.txt
	grep -q 'FI_EP_RDM' $(BUILD)/fi_info.txt
	FI_PROVIDER_PATH=$(LIBDIR) fi_info -e > $(BUILD)/fi_info_e.txt
	@params=$$(sed -n 's/^#define FI_UET_PARAM_[A-Z_]* *"\(FI_UET_[A-Z_]*\)".*/\1/p' \
	    $(PREFIX)/include/rdma/fi_ext_uet.h); \
	[ -n "$$params" ] || { echo "no FI_UET_PARAM_* in fi_ext_uet.h"; exit 1; }; \
	for p in $$params; do \
	  grep -a -q "$$p:" $(BUILD)/fi_info_e.txt || { echo "fi_info -e lacks $$p"; exit 1; }; \
	done; echo "fi_info -e lists" $$params
	printf '%s\n' '#include <rdma/fi_ext_uet.h>' '#include <string.h>' \
	  'int main(void) { return FI_UET_DEFAULT_PORT != 4793 || strcmp(FI_UET_PARAM_MTU, "FI_UET_MTU") ||' \
	  '  FI_UET_DSCP_TO_TOS(FI_UET_DSCP_TRIMMED, 0) != 0x2C; }' > $(BUILD)/header_check.c
	$(CC) -std=c99 -pedantic -Wall -Wextra -Werror -I$(PREFIX)/include \
	  -o $(BUILD)/header_check $(BUILD)/header_check.c
	$(BUILD)/header_check

test-functional:
	@echo "== [4/7] C functional suite over the public fi_* API"
	$(RUN_ENV) timeout $(T_FUNC) $(PREFIX)/bin/uet_functional -p uet
	$(RUN_ENV) timeout $(T_FUNC) $(PREFIX)/bin/uet_stats -p uet
	$(RUN_ENV) timeout $(T_FUNC) $(PREFIX)/bin/uet_surface -p uet
	$(RUN_ENV) timeout $(T_FUNC) $(PREFIX)/bin/uet_host_read -p uet
	@echo "-- uet_functional again with same-host copies (FI_UET_HOST_READ=1, rendezvous from 16 KiB)"
	$(RUN_ENV) FI_UET_HOST_READ=1 FI_UET_RENDEZVOUS_BYTES=16384 timeout $(T_FUNC) $(PREFIX)/bin/uet_functional -p uet
	@echo "-- uet_functional again with same-host rings (FI_UET_HOST_RING=1)"
	$(RUN_ENV) FI_UET_HOST_RING=1 timeout $(T_FUNC) $(PREFIX)/bin/uet_functional -p uet
	@echo "-- as off loopback: packets sprayed over 16 source ports (FI_UET_LB=reps), 1472-byte packets; then a pick per packet (FI_UET_SPRAY_BYTES=1) with 2% loss and 10% reordering"
	$(RUN_ENV) $(SPRAYED) timeout $(T_FUNC) $(PREFIX)/bin/uet_functional -p uet
	$(RUN_ENV) $(SPRAYED) timeout $(T_FUNC) $(PREFIX)/bin/uet_surface -p uet
	$(RUN_ENV) $(SPRAYED) $(PER_PACKET) $(LOSSY) timeout $(T_FUNC) $(PREFIX)/bin/uet_functional -p uet
	$(RUN_ENV) $(SPRAYED) $(PER_PACKET) $(LOSSY) timeout $(T_FUNC) $(PREFIX)/bin/uet_surface -p uet
	@echo "-- under valgrind (memory errors, definite leaks): uet_surface, uet_functional close_order"
	$(RUN_ENV) timeout $(T_FUNC) $(VALGRIND) $(PREFIX)/bin/uet_surface -p uet
	$(RUN_ENV) timeout $(T_FUNC) $(VALGRIND) $(PREFIX)/bin/uet_functional -p uet -t close_order

test-pingpong:
	@echo "== [5/7] fi_pingpong over uet: msg, then tagged (all sizes, data checks)"
	timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 300 -c
	timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 300 -c -m tagged
	@echo "-- with injected faults: 2% loss plus 10% reordering (msg), then 5% trimming (tagged)"
	$(LOSSY) timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c
	FI_UET_FAULT_TRIM=50 timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c -m tagged
	@echo "-- same-host copies (FI_UET_HOST_READ=1, rendezvous from 16 KiB) between the two processes (tagged)"
	FI_UET_HOST_READ=1 FI_UET_RENDEZVOUS_BYTES=16384 timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c -m tagged
	@echo "-- same-host rings (FI_UET_HOST_RING=1), then rings and copies together (tagged)"
	FI_UET_HOST_RING=1 timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c
	FI_UET_HOST_RING=1 FI_UET_HOST_READ=1 FI_UET_RENDEZVOUS_BYTES=16384 timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c -m tagged
	@echo "-- as off loopback: sprayed over 16 source ports, 1472-byte packets (tagged)"
	$(SPRAYED) timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 100 -c -m tagged
	@echo "-- ordered delivery (FI_UET_DELIVERY=rod) with 2% loss plus reordering"
	FI_UET_DELIVERY=rod $(LOSSY) timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 50 -c

test-mpi:
	@echo "== [6/7] MPI over uet: Open MPI (pml cm, mtl ofi) and MPICH (ch4:ofi), 2 and 4 ranks"
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_check
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check
	@echo "-- halo exchanges between computing ranks (data checked): 2 ranks in pairs, 4 in a ring"
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_halo 8192 50 300
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_halo 4096 50 200 ring
	@echo "-- 4 ranks as off loopback: sprayed over 16 source ports, 1472-byte packets; then a pick per packet with 2% loss and 10% reordering"
	$(SPRAYED) timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check
	$(SPRAYED) $(PER_PACKET) $(LOSSY) timeout $(T_MPI) \
	  fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check
	@echo "-- 4 ranks over same-host rings (FI_UET_HOST_RING=1)"
	FI_UET_HOST_RING=1 timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check
	@echo "-- one-sided over uet: osc pt2pt (the default osc rdma uses the vader btl, not uet)"
	OMPI_MCA_osc=pt2pt timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_check
	@echo "-- 4 threads per rank (MPI_THREAD_MULTIPLE)"
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_threads 4
ifeq ($(MPICH),0)
	@echo "-- MPICH runs SKIPPED (MPICH=0)"
else
	@echo "-- MPICH $(MPICH_VERSION) ch4:ofi (its own libfabric 2.x; native RMA and atomics) over uet"
	$(MAKE) --no-print-directory $(MPICH_PROGS)
	timeout $(T_MPI) fabtests/scripts/mpich.sh $(MPICH_HOME) $(PREFIX) 2 $(BUILD)/mpich-bin/mpi_check
	timeout $(T_MPI) fabtests/scripts/mpich.sh $(MPICH_HOME) $(PREFIX) 4 $(BUILD)/mpich-bin/mpi_check
	$(SPRAYED) $(PER_PACKET) $(LOSSY) timeout $(T_MPI) \
	  fabtests/scripts/mpich.sh $(MPICH_HOME) $(PREFIX) 4 $(BUILD)/mpich-bin/mpi_check
	timeout $(T_MPI) fabtests/scripts/mpich.sh $(MPICH_HOME) $(PREFIX) 4 $(BUILD)/mpich-bin/mpi_halo 4096 50 200 ring
	MPIR_CVAR_CH4_NUM_VCIS=4 timeout $(T_MPI) \
	  fabtests/scripts/mpich.sh $(MPICH_HOME) $(PREFIX) 2 $(BUILD)/mpich-bin/mpi_threads 4
endif

test-big:
	@echo "== [7/7] one 256 MiB message"
	$(RUN_ENV) timeout $(T_BIG) $(PREFIX)/bin/uet_functional -p uet -b -t big

# Needs the provider's relay support (FI_UET_FABRIC): --check fails when no
# datagram crossed the relay or a flow did not complete.
test-matrix:
	@echo "== [8] connection matrix through the emu-net relay and in virtual time (smoke scenario)"
	$(RUN_ENV) timeout $(T_MATRIX) $(PREFIX)/bin/uet-emu run fabtests/scenarios/smoke.toml \
	  --out $(BUILD)/matrix-smoke --matrix $(PREFIX)/bin/uet_matrix --check
	timeout $(T_MATRIX) $(PREFIX)/bin/uet-emu sim fabtests/scenarios/smoke.toml \
	  --out $(BUILD)/matrix-smoke-virtual --quiet

$(TEST_STAGES): | $(BUILD)
$(BUILD):
	@mkdir -p $@

DEMO_SCENARIOS ?= incast8 permutation16
# Relay runs stretch emulated time this many times (uet-emu run --slowdown):
# at the written rates, 8 to 16 host processes on 2 cores wait for a CPU
# for a sizeable part of each RTT and the run is not a valid measurement.
EMU_SLOWDOWN ?= 8

# Virtual time first (the provider's engine in the model's clock: seconds,
# valid on any machine), then the real provider through the relay.
demo: install ## Install, fi_pingpong uet vs tcp, then incast and permutation in virtual time and through the emu-net relay (results/)
	DEMO_ITERS=$${DEMO_ITERS:-200} fabtests/scripts/demo.sh $(PREFIX) || true
	@failed=0; for s in $(DEMO_SCENARIOS); do \
	  $(PREFIX)/bin/uet-emu sim fabtests/scenarios/$$s.toml --out results/virtual/$$s --quiet \
	    --plot fabtests/scripts/plot_matrix.py || failed=1; done; \
	  [ $$failed = 0 ] || echo "== some virtual-time variants failed (see results/virtual/*/table.txt)"
	@failed=0; for s in $(DEMO_SCENARIOS); do \
	  $(RUN_ENV) $(PREFIX)/bin/uet-emu run fabtests/scenarios/$$s.toml --out results/$$s \
	    --matrix $(PREFIX)/bin/uet_matrix --plot fabtests/scripts/plot_matrix.py \
	    --slowdown $(EMU_SLOWDOWN) || failed=1; done; \
	  [ $$failed = 0 ] || echo "== some variants failed (see FAILED lines in results/*/table.txt)"; \
	  [ $$failed = 0 ]
	@$(BENCH_PY) fabtests/scripts/demo_targets.py results || true
	@echo "== make demo: tables in results/*/table.txt and results/virtual/*/table.txt, plots beside them (PNG and SVG)"

# Every shipped paper scenario with all its variants (several minutes).
DEMO_ALL_SCENARIOS ?= incast8 incast15 incast8_sizes permutation16 alltoall8 link_failure asymmetric
# At the papers' full rates (100 Gb/s, 1 us links): virtual time only.
DEMO_VIRTUAL_ONLY ?= incast15_100g permutation16_100g

demo-all: install ## Install, then every emu-net paper scenario and variant, in virtual time and through the relay (results/)
	@failed=0; for s in $(DEMO_ALL_SCENARIOS) $(DEMO_VIRTUAL_ONLY); do \
	  $(PREFIX)/bin/uet-emu sim fabtests/scenarios/$$s.toml --out results/virtual/$$s --quiet \
	    --plot fabtests/scripts/plot_matrix.py || failed=1; done; \
	  [ $$failed = 0 ] || echo "== some virtual-time variants failed (see results/virtual/*/table.txt)"
	@failed=0; for s in $(DEMO_ALL_SCENARIOS); do \
	  $(RUN_ENV) $(PREFIX)/bin/uet-emu run fabtests/scenarios/$$s.toml --out results/$$s \
	    --matrix $(PREFIX)/bin/uet_matrix --plot fabtests/scripts/plot_matrix.py \
	    --slowdown $(EMU_SLOWDOWN) || failed=1; done; \
	  [ $$failed = 0 ] || echo "== some variants failed (see FAILED lines in results/*/table.txt)"; \
	  [ $$failed = 0 ]
	@cat $(patsubst %,results/virtual/%/table.txt,$(DEMO_ALL_SCENARIOS) $(DEMO_VIRTUAL_ONLY))
	@cat $(patsubst %,results/%/table.txt,$(DEMO_ALL_SCENARIOS))
	@$(BENCH_PY) fabtests/scripts/demo_targets.py results || true
	@echo "== make demo-all: tables in results/*/table.txt and results/virtual/*/table.txt, plots beside them (PNG and SVG)"

# Debian's python3 carries python3-matplotlib (a pyenv python3 may not).
BENCH_PY  ?= /usr/bin/python3
BENCH_STAMP := $(shell date -u +%Y%m%dT%H%M%SZ)
BENCH_OUT ?= $(CURDIR)/results/bench/$(BENCH_STAMP)
T_BENCH   := 1500
# The MPICH halo program the bench runs (none with MPICH=0, as test-mpi).
BENCH_MPICH_HALO := $(if $(filter 0,$(MPICH)),,$(BUILD)/mpich-bin/mpi_halo)

# The parts run one after another, also under -j: a benchmark must not
# share the machine with a build.
bench: install ## uet vs tcp, udp;ofi_rxd, raw UDP (BENCH_QUICK=1: short run; MPICH=0: no MPICH halo; PGO=0: the plain build)
	$(MAKE) --no-print-directory bench-micro
	$(MAKE) --no-print-directory bench-nscc
	@echo "== fi_pingpong, streaming bandwidth and raw UDP; results in $(BENCH_OUT)"
ifneq ($(BENCH_MPICH_HALO),)
	$(MAKE) --no-print-directory $(BENCH_MPICH_HALO)
endif
ifneq ($(PGO_ON),)
	install -D -m 0755 $(SO) $(BUILD)/plain-provider/libuet-fi.so
endif
	UET_BW=$(BUILD)/bin/uet_bw UET_BUILD="$(if $(PGO_ON),profile-guided (PGO=1),plain release (PGO=0))$(comma) as installed in $(LIBDIR)" \
	  $(if $(PGO_ON),UET_PLAIN_LIBDIR=$(BUILD)/plain-provider) \
	  $(if $(BENCH_MPICH_HALO),MPICH_HOME=$(MPICH_HOME) MPICH_HALO=$(BENCH_MPICH_HALO)) \
	  timeout $(T_BENCH) $(BENCH_PY) fabtests/scripts/bench.py \
	  $(PREFIX) $(BENCH_OUT) $(if $(BENCH_QUICK),--quick)
	@ln -sfn $(BENCH_OUT) $(CURDIR)/results/bench/latest

bench-nscc: deps ## NSCC per-ACK instructions (callgrind) and per-flow state size
	@echo "== NSCC cost (provider/examples/nscc_per_ack.rs under callgrind)"
	$(CARGO) build --release -p uet --example nscc_per_ack
	fabtests/scripts/nscc_cost.sh target/release/examples/nscc_per_ack

bench-micro: deps ## criterion benches of the engine (provider/benches)
	@echo "== criterion micro-benchmarks (provider/benches)"
	timeout $(T_CARGO) $(CARGO) bench -p uet --bench engine -- \
	  $(if $(BENCH_QUICK),--quick,--warm-up-time 1 --measurement-time 2)

# Fuzzing: cargo-fuzz on stable Rust (RUSTC_BOOTSTRAP lets it pass its
# nightly-only flags; no sanitizer, debug assertions on). Each target runs
# FUZZ_SECONDS, starting from the committed corpus fuzz/corpus/<target>/;
# new inputs go to build/fuzz/<target>/, crashes to fuzz/artifacts/<target>/.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := wire_parse engine_datagram
FUZZ_ENV     := RUSTC_BOOTSTRAP=1

fuzz: deps | $(BUILD) ## Run every fuzz target for FUZZ_SECONDS (default 60) each
	@$(CARGO) fuzz --version >/dev/null 2>&1 || { \
	  echo "== installing cargo-fuzz"; $(CARGO) install cargo-fuzz --locked; }
	cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz build -s none -O -a
	@n=0; for t in $(FUZZ_TARGETS); do n=$$((n+1)); \
	  echo "== [fuzz $$n/$(words $(FUZZ_TARGETS))] $$t for $(FUZZ_SECONDS) s"; \
	  mkdir -p $(BUILD)/fuzz/$$t; \
	  ( cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz run -s none -O -a $$t \
	      $(BUILD)/fuzz/$$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) \
	      -print_final_stats=1 ) > $(BUILD)/fuzz/$$t.log 2>&1; rc=$$?; \
	  grep -E '^#[0-9]+[[:space:]]+(pulse|DONE)|^Done' $(BUILD)/fuzz/$$t.log | tail -n 3; \
	  if [ $$rc != 0 ]; then tail -n 40 $(BUILD)/fuzz/$$t.log; \
	    echo "== make fuzz: $$t FAILED (log: $(BUILD)/fuzz/$$t.log; input in fuzz/artifacts/$$t/);"; \
	    echo "   fix it, then copy the input to fuzz/corpus/$$t/ so make test replays it"; \
	    exit 1; fi; done
	@echo "== make fuzz: no crash in $(FUZZ_TARGETS)"

lint: ## cargo fmt --check and clippy -D warnings
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the Rust code
	$(CARGO) fmt --all

clean: ## Remove target/, build/ and the default install dir
	$(CARGO) clean
	rm -rf $(BUILD) $(CURDIR)/install
