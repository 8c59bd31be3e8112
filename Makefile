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

# Debian packages: libfabric headers/tools and Open MPI for the C tests,
# libclang for bindgen, valgrind for leak runs; python3 and iproute2 (ss)
# are used by fabtests/scripts.
DEB_PKGS  := libfabric-dev libfabric-bin libclang-dev openmpi-bin libopenmpi-dev \
             pkg-config valgrind python3 iproute2

# C programs: every fabtests/functional/*.c and fabtests/mpi/*.c is one
# program (headers beside them are shared). Absent directories build nothing.
FUNC_SRC  := $(wildcard fabtests/functional/*.c)
MPI_SRC   := $(wildcard fabtests/mpi/*.c)
FUNC_HDR  := $(wildcard fabtests/functional/*.h)
MPI_HDR   := $(wildcard fabtests/mpi/*.h)
FUNC_BIN  := $(patsubst fabtests/functional/%.c,$(BUILD)/bin/%,$(FUNC_SRC))
MPI_BIN   := $(patsubst fabtests/mpi/%.c,$(BUILD)/bin/%,$(MPI_SRC))
SCRIPTS   := $(wildcard fabtests/scripts/*.sh)

# What selects the freshly installed provider in the test stages.
RUN_ENV   := FI_PROVIDER_PATH=$(LIBDIR) FI_PROVIDER=uet
# --keep-debuginfo: the provider is dlclose'd before the leak check; its
# symbols are needed to match the suppressions.
VALGRIND  := valgrind -q --error-exitcode=3 --leak-check=full \
	--errors-for-leak-kinds=definite --show-leak-kinds=definite --keep-debuginfo=yes \
	--suppressions=$(CURDIR)/fabtests/functional/valgrind.supp

# Upper bounds (seconds) that stop a hung stage; typical runs are far shorter.
T_CARGO   := 600
T_FUNC    := 180
T_PP      := 300
T_MPI     := 150
T_BIG     := 180

TEST_STAGES := test-lint test-rust test-discovery test-functional test-pingpong test-mpi test-big

.PHONY: all build rust c-progs deps install test $(TEST_STAGES) demo lint fmt clean help

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

c-progs: $(FUNC_BIN) $(MPI_BIN)

# `| deps`: the compilers and headers come from the Debian packages.
$(BUILD)/bin/%: fabtests/functional/%.c $(FUNC_HDR) | deps
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CURDIR)/include $$(pkg-config --cflags libfabric) -o $@ $< \
	  $$(pkg-config --libs libfabric)

$(BUILD)/bin/%: fabtests/mpi/%.c $(MPI_HDR) | deps
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -I$(CURDIR)/include -o $@ $<

install: build ## Install into PREFIX (default ./install; no root needed)
	install -d $(LIBDIR) $(PREFIX)/include/rdma $(PREFIX)/bin
	install -m 0755 $(SO) $(LIBDIR)/libuet-fi.so
	install -m 0644 include/rdma/fi_ext_uet.h $(PREFIX)/include/rdma/
	install -m 0755 target/release/uet-emu $(FUNC_BIN) $(MPI_BIN) $(SCRIPTS) $(PREFIX)/bin/

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
	timeout $(T_CARGO) $(CARGO) test --workspace --release

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
	$(RUN_ENV) timeout $(T_FUNC) $(PREFIX)/bin/uet_surface -p uet
	@echo "-- under valgrind (memory errors, definite leaks): uet_surface, uet_functional close_order"
	$(RUN_ENV) timeout $(T_FUNC) $(VALGRIND) $(PREFIX)/bin/uet_surface -p uet
	$(RUN_ENV) timeout $(T_FUNC) $(VALGRIND) $(PREFIX)/bin/uet_functional -p uet -t close_order

test-pingpong:
	@echo "== [5/7] fi_pingpong over uet: msg, then tagged (all sizes, data checks)"
	timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 1000 -c
	timeout $(T_PP) fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 1000 -c -m tagged

test-mpi:
	@echo "== [6/7] Open MPI (pml cm, mtl ofi) over uet: 2 and 4 ranks"
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_check
	timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check
	@echo "-- one-sided over uet: osc pt2pt (the default osc rdma uses the vader btl, not uet)"
	OMPI_MCA_osc=pt2pt timeout $(T_MPI) fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_check

test-big:
	@echo "== [7/7] one 256 MiB message"
	$(RUN_ENV) timeout $(T_BIG) $(PREFIX)/bin/uet_functional -p uet -b -t big

$(TEST_STAGES): | $(BUILD)
$(BUILD):
	@mkdir -p $@

demo: install ## Install, then fi_pingpong over uet beside tcp on 127.0.0.1
	fabtests/scripts/demo.sh $(PREFIX)

lint: ## cargo fmt --check and clippy -D warnings
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the Rust code
	$(CARGO) fmt --all

clean: ## Remove target/, build/ and the default install dir
	$(CARGO) clean
	rm -rf $(BUILD) $(CURDIR)/install
