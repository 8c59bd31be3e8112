# uet: build, install, test and demo. `make help` lists the targets.
#
# Everything a fresh Debian machine lacks is installed by `make deps` (root
# runs apt-get; everyone else is told what to install). Nothing is installed
# outside the checkout unless PREFIX says so.

PREFIX    ?= $(CURDIR)/install
BUILD     := $(CURDIR)/build
CARGO     ?= cargo
CC        ?= cc
MPICC     ?= mpicc
CFLAGS    ?= -O2 -g -Wall -Wextra
LIBDIR    := $(PREFIX)/lib/libfabric
SO        := target/release/libuet_fi.so

# Debian packages the targets use; see `deps`.
DEB_PKGS  := libfabric-dev libfabric-bin libclang-dev openmpi-bin libopenmpi-dev pkg-config valgrind iproute2 python3

FUNC_SRC  := $(wildcard fabtests/functional/*.c)
MPI_SRC   := $(wildcard fabtests/mpi/*.c)
FUNC_BIN  := $(patsubst fabtests/functional/%.c,$(BUILD)/bin/%,$(FUNC_SRC))
MPI_BIN   := $(patsubst fabtests/mpi/%.c,$(BUILD)/bin/%,$(MPI_SRC))
SCRIPTS   := $(wildcard fabtests/scripts/*.sh)

# Every test stage runs with the freshly installed provider and nothing else.
RUN_ENV   := FI_PROVIDER_PATH=$(LIBDIR) FI_PROVIDER=uet

.PHONY: all build deps install test test-rust test-discovery test-c test-pingpong \
        test-mpi test-big demo lint fmt clean help

all: build ## Build the provider, tools and C test programs

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

deps: ## Install missing system packages (apt-get) and check the Rust toolchain
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "== installing:$$missing"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -q && apt-get install -y -q --no-install-recommends $$missing; \
	  else echo "missing Debian packages:$$missing (run: sudo apt-get install$$missing)"; exit 1; fi; \
	fi
	@command -v $(CARGO) >/dev/null || { echo "cargo not found: install Rust stable from https://rustup.rs"; exit 1; }
	@if command -v rustup >/dev/null; then \
	  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt; \
	fi

build: deps
	$(CARGO) build --release --workspace
	@$(MAKE) --no-print-directory $(FUNC_BIN) $(MPI_BIN)

$(BUILD)/bin/%: fabtests/functional/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< -lfabric

$(BUILD)/bin/%: fabtests/mpi/%.c
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -o $@ $<

install: build ## Install into PREFIX (default: ./install)
	install -d $(LIBDIR) $(PREFIX)/include/rdma $(PREFIX)/bin
	install -m 0755 $(SO) $(LIBDIR)/libuet-fi.so
	install -m 0644 include/rdma/fi_ext_uet.h $(PREFIX)/include/rdma/
	install -m 0755 target/release/uet-emu $(FUNC_BIN) $(MPI_BIN) $(SCRIPTS) $(PREFIX)/bin/

test: install ## Lint, Rust tests, then the C, fi_pingpong and MPI suites over uet
	@$(MAKE) --no-print-directory lint test-rust test-discovery test-c test-pingpong test-mpi test-big
	@echo "== make test: all stages passed"

test-rust:
	@echo "== Rust unit, property and loopback tests"
	$(CARGO) test --release --workspace

test-discovery:
	@echo "== provider discovery (fi_info) and the extension header"
	$(RUN_ENV) fi_info -p uet | grep -q 'FI_EP_RDM'
	FI_PROVIDER_PATH=$(LIBDIR) fi_info -e | grep -a -q 'FI_UET_MTU'
	@printf '#include <rdma/fi_ext_uet.h>\nint main(void) { return FI_UET_DEFAULT_PORT != 4793; }\n' \
	  | $(CC) -Wall -Werror -I$(PREFIX)/include -x c - -o $(BUILD)/header_check && $(BUILD)/header_check

test-c:
	@echo "== C functional suite over the public fi_* API"
	@if [ -x $(PREFIX)/bin/uet_functional ]; then \
	  $(RUN_ENV) timeout 600 $(PREFIX)/bin/uet_functional -p uet; \
	else echo "no C functional suite built"; exit 1; fi

test-pingpong:
	@echo "== fi_pingpong over uet (msg and tagged, all sizes, data checks)"
	timeout 900 fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 1000 -c
	timeout 900 fabtests/scripts/pingpong.sh $(PREFIX) -S all -I 1000 -c -m tagged

test-mpi:
	@echo "== Open MPI (pml cm, mtl ofi) over uet"
	timeout 600 fabtests/scripts/mpi.sh $(PREFIX) 2 $(PREFIX)/bin/mpi_check
	timeout 600 fabtests/scripts/mpi.sh $(PREFIX) 4 $(PREFIX)/bin/mpi_check

test-big:
	@echo "== one 256 MiB message"
	$(RUN_ENV) timeout 600 $(PREFIX)/bin/uet_functional -p uet -b -t big

demo: install ## fi_pingpong over uet beside tcp on 127.0.0.1
	fabtests/scripts/demo.sh $(PREFIX)

lint: ## cargo fmt --check and clippy -D warnings
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt: ## Format the Rust code
	$(CARGO) fmt --all

clean: ## Remove build outputs and the default install
	$(CARGO) clean
	rm -rf $(BUILD) $(CURDIR)/install
