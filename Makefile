# objstore - top-level build. Every output lands under build/. `make help` prints
# every target, one line each: the `#:` lines below (tests/lint/test_make_help.py
# checks that every target of this file has one).
#
#: all                 build/objstore.so, objstore-rdma.so (the RDMA door, Redis 7.0), the client library, examples, obj-benchmark
#: help                this list
#: install             module, client library, headers, objstore.pc under PREFIX (/usr/local); DESTDIR= stages
#: run                 one node on 127.0.0.1:6379 or the next free port (installs what it needs); PORT=, RUN_ARGS=
#: deps                install the Debian packages the project needs
#: ensure-deps         deps, only when something is missing (make test runs it)
#: ensure-run-deps     what `make run` needs, only when something is missing
#: deb                 the Debian packages (debian/) into build/deb/
#: python              the Python package (client/python) into the venv build/python-venv
#: python-san          the Python package with its extension under ASan/UBSan (build/san-address/python-venv)
#: servers             Redis 8.0.2 and Valkey 8.1.1 built from Debian 13's source packages (cached)
#: redis-cli-rdma      the patched redis-cli --rdma (build/redis-cli-rdma)
#: test-programs       every test program (unit, server, RDMA), also under SAN=
#: softroce-programs   what the Soft-RoCE suites need built on the host
#: test                CI's gate (tests/run-all.sh): every suite, in lanes side by side (docs/testing.md#ci)
#: test-full           every suite at full length: the whole server suite on every server and under ASan/UBSan
#: test-unit           the C unit tests (tests/unit)
#: test-server         the server suite against real servers (tests/server); PYTEST_ARGS=, VALGRIND=1, SAN=
#: test-python         the Python package's suite (tests/python); PYTHON_PYTEST_ARGS=
#: test-python-san     the Python extension under ASan/UBSan and the metadata fuzzer
#: test-python-rdma    the Python package over RDMA (device or Soft-RoCE guest)
#: test-chaos          nodes in network namespaces under random faults (tests/chaos); CHAOS_SECONDS=, CHAOS_SEED=
#: test-fuzz           the standalone fuzz drivers (wire frames, stream reassembly, RDMA stream control)
#: test-packaging      the Debian packages installed, run as an operator would, purged (root, throwaway machine)
#: test-redis-suite    Redis's own tests against a server with the module loaded
#: test-rdma           the RDMA transfer suite (device or Soft-RoCE guest)
#: test-rdma-resp      Redis protocol over RDMA: stream endpoint, door, client library (one guest)
#: test-rdma-valkey    interop with Valkey 8.1.1's built-in RDMA (make servers first)
#: test-softroce       every Soft-RoCE suite CI runs, plain and ASan/UBSan, in one guest boot
#: san-preload         print the LD_PRELOAD a SAN= build of the module needs in redis-server
#: bench               fetch vs Redis GET vs iperf3 on loopback (bench/results/)
#: lint                clang-format check, layering, links, error words, the checks' own tests
#: lint-layers         lint without clang-format: layers, links, bench tables, error words, the checks' tests
#: format              clang-format every C file in place
#: clean               remove this build (build/, or build/san-<SAN>/ with SAN=)
#: distclean           remove build/ entirely
#
# Variables: SAN=address (ASan/UBSan build under build/san-address/), DEBUG=1 (-O0 -g,
# extra checks), REDIS_SRC=/path (redismodule.h from a Redis source tree), VALGRIND=1
# (test-server's servers under valgrind), SERVERS_CACHE (where `make servers` builds).
#
# module/ is one folder per component, each built into its own static library
# (build/lib/libobj_<component>.a) so that a unit test links only what it tests.
# Which component may include which is written down once, in tests/lint/layers.

.DEFAULT_GOAL := all

CC      ?= cc
PORT    ?= 6379
SAN     ?=
DEBUG   ?=
VALGRIND ?=
# The other servers (make servers), built outside the checkout and reused.
SERVERS_CACHE ?= /var/cache/objstore/servers
# A sanitizer build lives apart so that it never replaces the normal one.
ifeq ($(SAN),)
BUILD   := build
else
BUILD   := build/san-$(SAN)
endif
MODULE  := $(BUILD)/objstore.so
DOOR_MODULE := $(BUILD)/objstore-rdma.so

CFLAGS  := -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC -pthread \
           -D_GNU_SOURCE -Ibuild/include -Imodule -Iclient
# EXTRA_CFLAGS: the packager's flags (debian/rules passes dpkg-buildflags' CFLAGS and
# CPPFLAGS: hardening, file-prefix-map), added after ours.
EXTRA_CFLAGS ?=
ifeq ($(DEBUG),1)
CFLAGS  += -O0 -g3 -DOBJ_DEBUG
else
CFLAGS  += -O2 -g
endif
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN),undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=$(SAN),undefined
endif
LDFLAGS += $(LDSAN) -pthread
CFLAGS  += $(EXTRA_CFLAGS)

# ---- the module: one static library per component, lowest layer first ---------------
COMPONENTS := common store directory rdma transfer replica door redis
# The libraries of objstore.so in link order (a library before the ones it
# needs). door is not among them: it is objstore-rdma.so, a module of its own.
COMP_LIBS  := $(foreach c,redis replica transfer rdma directory store common,$(BUILD)/lib/libobj_$(c).a)
DOOR_LIBS  := $(foreach c,door rdma common,$(BUILD)/lib/libobj_$(c).a)
define component_rule
$(1)_OBJ := $$(patsubst %.c,$$(BUILD)/%.o,$$(wildcard module/$(1)/*.c))
$$(BUILD)/lib/libobj_$(1).a: $$($(1)_OBJ)
	@mkdir -p $$(dir $$@)
	rm -f $$@ && ar rcs $$@ $$^
endef
$(foreach c,$(COMPONENTS),$(eval $(call component_rule,$(c))))
MODULE_OBJ := $(foreach c,$(COMPONENTS),$($(c)_OBJ))

CORE_LIBS := -lxxhash -lhiredis -lcrypto -lrdmacm -libverbs
# redis-server exports its own bundled (newer, incompatible) hiredis: link ours
# statically and keep its symbols local, so the module never binds to that copy.
MOD_LIBS := -Wl,--exclude-libs,libhiredis.a -Wl,-Bstatic -lhiredis -Wl,-Bdynamic \
            -lxxhash -lcrypto -lrdmacm -libverbs

# ---- the client library -------------------------------------------------------------
# objstore_rdma.c/rdmaconn.c: ObjClient over RDMA (objClientConnectRdma) on
# module/rdma's stream endpoint (Valkey Over RDMA); a static link that never
# calls it needs neither them nor the RDMA libraries.
CLI_RDMA_OBJ := $(filter $(addprefix $(BUILD)/module/rdma/,stream.o streamcm.o streamproto.o),$(rdma_OBJ))
# common/util.o: the one hex parser (utilParseHex64) the client shares with the module.
CLI_COMMON_OBJ := $(BUILD)/module/common/util.o
CLI_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard client/*.c)) $(CLI_RDMA_OBJ) $(CLI_COMMON_OBJ)
CLI_LIBS := -lhiredis -lrdmacm -libverbs
CLIENT_A := $(BUILD)/client/libobjstore.a
comma := ,
# The shared library is versioned: the real file libobjstore.so.X.Y.Z, its
# SONAME libobjstore.so.X (what programs record) and the link-time name
# libobjstore.so, both symlinks. The version is read from objstore.h's macros.
obj_version_part = $(shell sed -n 's/^\#define OBJSTORE_VERSION_$(1)  *\([0-9]*\).*/\1/p' client/objstore.h)
CLIENT_VERSION := $(call obj_version_part,MAJOR).$(call obj_version_part,MINOR).$(call obj_version_part,PATCH)
CLIENT_SONAME := libobjstore.so.$(call obj_version_part,MAJOR)
CLIENT_SO_REAL := $(BUILD)/client/libobjstore.so.$(CLIENT_VERSION)
CLIENT_SO := $(BUILD)/client/libobjstore.so
CLIENT_PC := $(BUILD)/client/objstore.pc
# Only the public API (objstore.h, rdmaconn.h) leaves the shared library.
CLIENT_MAP := client/objstore.map

EXAMPLES    := $(patsubst client/examples/%.c,$(BUILD)/examples/%,$(wildcard client/examples/*.c))
BENCHMARK   := $(BUILD)/bin/obj-benchmark

.PHONY: all deps install run test test-programs test-unit test-server test-fuzz test-rdma \
        test-rdma-resp lint lint-layers format bench clean distclean san-preload redis-cli-rdma \
        servers test-redis-suite test-rdma-valkey deb test-packaging test-full softroce-programs \
        test-softroce help
all: $(MODULE) $(DOOR_MODULE) $(CLIENT_A) $(CLIENT_SO) $(CLIENT_PC) $(EXAMPLES) $(BENCHMARK)
help:
	@sed -n 's/^#: /  make /p' $(firstword $(MAKEFILE_LIST))

# ---- dependencies -----------------------------------------------------------
# A marker per dependency set: `make run`/`make test` call deps only when the
# tools are missing, so a fresh machine needs nothing but make.
DEPS_OK := $(shell tests/install-deps.sh --check && echo yes)
deps:
	tests/install-deps.sh
ifeq ($(DEPS_OK),yes)
ensure-deps: ;
else
ensure-deps: deps
endif
RUN_DEPS_OK := $(if $(filter yes,$(DEPS_OK)),yes,$(shell tests/install-deps.sh --run --check && echo yes))
ifeq ($(RUN_DEPS_OK),yes)
ensure-run-deps: ;
else
ensure-run-deps:
	tests/install-deps.sh --run
endif
.PHONY: ensure-deps ensure-run-deps

# ---- redismodule.h from the Redis source package ------------------------------
build/include/redismodule.h:
	@mkdir -p build/include
	@if [ -n "$(REDIS_SRC)" ]; then cp "$(REDIS_SRC)/src/redismodule.h" $@; \
	else tests/fetch-redismodule-h.sh build && cp build/redis-src/src/redismodule.h $@; fi

# ---- objects ------------------------------------------------------------------
$(BUILD)/%.o: %.c | build/include/redismodule.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(shell find $(BUILD) -path build/deb -prune -o -name '*.d' -type f -print 2>/dev/null)

# The RDMA connection type (module/door/conntype.c) is compiled against the
# server.h of the source the installed redis-server was built from (the
# distribution's patches applied: they move fields of struct redisServer).
REDIS_SERVER_SRC := build/redis-server-src
$(REDIS_SERVER_SRC)/.patched: | build/include/redismodule.h
	tests/fetch-redis-server-src.sh build $(REDIS_SRC)
$(BUILD)/module/door/conntype.o: CFLAGS += -I$(REDIS_SERVER_SRC)/src -I$(REDIS_SERVER_SRC)/deps/lua/src \
    -I$(REDIS_SERVER_SRC)/deps/hdr_histogram
# Its references to the server's internals (module/door/serversyms.h) are
# made weak, so that objstore-rdma.so loads into any server far enough to
# check it and refuse with a clear message (door.c), not a dynamic linker error.
DOOR_SYMS := module/door/serversyms.h
$(BUILD)/module/door/conntype.o: module/door/conntype.c $(DOOR_SYMS) | $(REDIS_SERVER_SRC)/.patched \
    build/include/redismodule.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
	sed -n 's/^DOOR_SERVER_SYM(\([A-Za-z0-9_]*\))$$/\1/p' $(DOOR_SYMS) >$@.weak
	objcopy --weaken-symbols=$@.weak $@

# Only RedisModule_OnLoad leaves the module: nothing of ours can collide with
# (or be bound to) a symbol of redis-server.
$(MODULE_OBJ): CFLAGS += -fvisibility=hidden

# The module is the union of the component libraries.
$(MODULE): $(COMP_LIBS)
	$(CC) -shared -o $@ -Wl,--whole-archive $(COMP_LIBS) -Wl,--no-whole-archive \
	    $(LDFLAGS) $(MOD_LIBS)
# The RDMA door: module/door/ and the stream endpoint it runs on.
$(DOOR_MODULE): $(DOOR_LIBS)
	$(CC) -shared -o $@ -Wl,--whole-archive $(BUILD)/lib/libobj_door.a -Wl,--no-whole-archive \
	    $(BUILD)/lib/libobj_rdma.a $(BUILD)/lib/libobj_common.a $(LDFLAGS) -lrdmacm -libverbs -ldl

$(CLIENT_A): $(CLI_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(CLIENT_SO_REAL): $(CLI_OBJ) $(CLIENT_MAP)
	@mkdir -p $(dir $@)
	$(CC) -shared -o $@ -Wl,-soname,$(CLIENT_SONAME) -Wl,--version-script,$(CLIENT_MAP) \
	    $(CLI_OBJ) $(LDFLAGS) $(CLI_LIBS)
$(CLIENT_SO): $(CLIENT_SO_REAL)
	ln -sf $(notdir $<) $(dir $@)$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $@
# objstore.pc for the build tree (headers in client/, library in $(BUILD)/client,
# with an rpath); `make install` writes its own for the installed prefix.
pc_subst = sed -e 's|@VERSION@|$(CLIENT_VERSION)|' -e 's|@PREFIX@|$(1)|' -e 's|@INCLUDEDIR@|$(2)|' \
    -e 's|@LIBDIR@|$(3)|' -e 's|@RPATH@|$(4)|' client/objstore.pc.in
$(CLIENT_PC): client/objstore.pc.in client/objstore.h
	@mkdir -p $(dir $@)
	$(call pc_subst,$(CURDIR),$${prefix}/client,$(CURDIR)/$(BUILD)/client,-Wl$(comma)-rpath$(comma)$${libdir} ) > $@
$(BUILD)/examples/%: client/examples/%.c $(CLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CLIENT_A) $(LDFLAGS) $(CLI_LIBS)
$(BENCHMARK): bench/obj-benchmark.c client/objstore.h $(CLIENT_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CLIENT_A) $(LDFLAGS) $(CLI_LIBS) -lxxhash -lm

# ---- install ----------------------------------------------------------------------
# make install [PREFIX=/usr/local] [DESTDIR=/staging]: the module into
# $(PREFIX)/lib/redis/modules, the client library (.a, the versioned .so and
# its links) into $(PREFIX)/lib, its headers into $(PREFIX)/include/objstore
# and an objstore.pc that names $(PREFIX) into $(PREFIX)/lib/pkgconfig.
# DESTDIR is prepended to every path but never written into a file. LIBDIR moves
# the client library and objstore.pc (debian/rules: the multiarch directory); the
# modules stay in $(PREFIX)/lib/redis/modules, where Redis packages look.
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INST_LIB   := $(DESTDIR)$(LIBDIR)
INST_INC   := $(DESTDIR)$(PREFIX)/include/objstore
INST_MOD   := $(DESTDIR)$(PREFIX)/lib/redis/modules
INST_PC    := $(INST_LIB)/pkgconfig
CLIENT_HEADERS := client/objstore.h client/rdmaconn.h
install: $(MODULE) $(DOOR_MODULE) $(CLIENT_A) $(CLIENT_SO) client/objstore.pc.in
	install -d $(INST_MOD) $(INST_LIB) $(INST_INC) $(INST_PC)
	install -m 755 $(MODULE) $(INST_MOD)/objstore.so
	install -m 755 $(DOOR_MODULE) $(INST_MOD)/objstore-rdma.so
	install -m 644 $(CLIENT_A) $(INST_LIB)/
	install -m 755 $(CLIENT_SO_REAL) $(INST_LIB)/
	ln -sf $(notdir $(CLIENT_SO_REAL)) $(INST_LIB)/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $(INST_LIB)/libobjstore.so
	install -m 644 $(CLIENT_HEADERS) $(INST_INC)/
	$(call pc_subst,$(PREFIX),$${prefix}/include/objstore,$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR)),) > $(INST_PC)/objstore.pc

# ---- Debian packages ----------------------------------------------------------------
# `make deb`: the packages of debian/ (redis-objstore, redis-objstore-rdma, libobjstore0,
# libobjstore-dev, python3-objstore, objstore-tools) built by dpkg-buildpackage from a
# copy of the tree in build/deb/, where the .deb files land (debian/make-deb.sh).
# `make test-packaging` installs them on this machine and checks them as an operator
# would, then purges them (tests/packaging/run.sh; docs/install.md).
deb:
	DEB_JOBS=2 debian/make-deb.sh
test-packaging:
	tests/packaging/run.sh

# ---- run ------------------------------------------------------------------------
# One node for a user: what it needs installed first (install-deps.sh --run: the
# server, hiredis, rdma-core, the build tools; nothing stopped or disabled), then
# 127.0.0.1:6379, or the next free port if 6379 is taken (it says which).
# `make run PORT=n` insists on n; RUN_ARGS=--once starts, checks and stops it.
run: ensure-run-deps all
	tests/run-node.sh build/objstore.so $(if $(filter command line,$(origin PORT)),--port $(PORT)) $(RUN_ARGS)

# ---- test programs ----------------------------------------------------------------
# Pure unit tests (tests/unit/): each links the component libraries it tests
# and, through them, nothing above (the link would fail if a lower layer
# needed a higher one).
UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(wildcard tests/unit/test_*.c))
UNIT_LIBS_test_util     := common
UNIT_LIBS_test_list     := common
UNIT_LIBS_test_alloc    := store common
UNIT_LIBS_test_objtable := store common
UNIT_LIBS_test_wire     := transfer common
UNIT_LIBS_test_framer   := transfer common
UNIT_LIBS_test_rdmaproto := transfer common
UNIT_LIBS_test_streamproto := rdma common
UNIT_LIBS_test_slots    := directory common
# The files of libraries named as components of module/ or client (libobjstore.a).
lib_files = $(foreach c,$(1),$(if $(filter client,$(c)),$(CLIENT_A),$(BUILD)/lib/libobj_$(c).a))
libs_for = $(call lib_files,$(UNIT_LIBS_$(1)))
.SECONDEXPANSION:
$(BUILD)/tests/unit/%: tests/unit/%.c $$(call libs_for,$$*)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(call libs_for,$*) $(LDFLAGS) -lcmocka $(CORE_LIBS)

# The other test programs, and the bench programs CI builds: like the unit tests, each
# is named once with its source (PROG_SRC_<name>), the libraries it links (PROG_LIBS_:
# components of module/, or client for libobjstore.a) and the system libraries
# (PROG_SYS_); one rule builds them all.
# Run against a real redis-server (tests/server/).
SERVER_PROGS := $(addprefix $(BUILD)/tests/server/,test_directory test_client broadcast_client)
PROG_SRC_test_directory    := tests/server/test_directory.c
PROG_LIBS_test_directory   := directory common
PROG_SYS_test_directory    := -lcmocka $(CORE_LIBS)
PROG_SRC_test_client       := tests/server/test_client.c
PROG_LIBS_test_client      := client
PROG_SYS_test_client       := $(CLI_LIBS) -lxxhash
PROG_SRC_broadcast_client  := tests/server/broadcast_client.c
PROG_LIBS_broadcast_client := client
PROG_SYS_broadcast_client  := $(CLI_LIBS) -lxxhash

VALKEY_RDMA_TEST := $(BUILD)/tests/rdma/valkey-rdma-test
# RDMA test programs (tests/rdma/): compiled here, run in the guest or on a device.
RDMA_PROGS := $(addprefix $(BUILD)/tests/rdma/,rdma_resp_client test_rdmaclient peer rdma_hostile \
                probe_mw stream_test) $(BUILD)/bin/mw-cost
# The stream endpoint against itself (tests/rdma/stream/run-in-guest.sh).
PROG_SRC_stream_test       := tests/rdma/stream/stream_test.c
PROG_LIBS_stream_test      := rdma
PROG_SYS_stream_test       := -lrdmacm -libverbs
PROG_SRC_rdma_resp_client  := tests/rdma/door/rdma_resp_client.c
PROG_LIBS_rdma_resp_client := rdma
PROG_SYS_rdma_resp_client  := -lrdmacm -libverbs
# A misbehaving node on the transfer transport: the project's own RDMA stream,
# framer and wire encoder, linked from the component libraries.
PROG_SRC_rdma_hostile      := tests/rdma/hostile/rdma_hostile.c
PROG_LIBS_rdma_hostile     := transfer rdma common
PROG_SYS_rdma_hostile      := -lrdmacm -libverbs -lcrypto -lxxhash
# What the device does with type-2 memory windows, and what they cost per transfer.
PROG_SRC_probe_mw          := tests/rdma/probe_mw.c
PROG_SYS_probe_mw          := -libverbs
PROG_SRC_mw-cost           := bench/mw-cost.c
PROG_SYS_mw-cost           := -libverbs
# The client library over RDMA, and the peer it talks to.
PROG_SRC_test_rdmaclient   := tests/rdma/client/test_rdmaclient.c
PROG_LIBS_test_rdmaclient  := client
PROG_SYS_test_rdmaclient   := $(CLI_LIBS)
PROG_SRC_peer              := tests/rdma/client/peer.c
PROG_LIBS_peer             := client
PROG_SYS_peer              := $(CLI_LIBS)
# The session MAC's cost per frame and per byte (bench/mac-cost.sh runs it).
PROG_SRC_mac-cost          := bench/mac-cost.c
PROG_LIBS_mac-cost         := transfer common
PROG_SYS_mac-cost          := -lcrypto -lxxhash
TEST_PROGS := $(SERVER_PROGS) $(RDMA_PROGS) $(BUILD)/bin/mac-cost
prog_libs = $(call lib_files,$(PROG_LIBS_$(1)))
$(TEST_PROGS): $$(PROG_SRC_$$(notdir $$@)) $$(call prog_libs,$$(notdir $$@))
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(PROG_SRC_$(notdir $@)) $(call prog_libs,$(notdir $@)) $(LDFLAGS) \
	    $(PROG_SYS_$(notdir $@))


# The sanitizer flags of every ASan/UBSan build outside SAN= (the fuzz drivers, the
# Python extension of `make python-san`).
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# The standalone fuzz drivers: always under ASan/UBSan, lightly optimized.
FUZZ_CFLAGS := -std=gnu11 -O1 -g -D_GNU_SOURCE -Imodule -Itests/fuzz $(SAN_FLAGS)
# The wire decoder's standalone fuzz driver.
FUZZ_BIN := build/fuzz/fuzz_wire_standalone
$(FUZZ_BIN): tests/fuzz/fuzz_wire.c tests/fuzz/fuzz_main.c tests/fuzz/fuzz_gen.h module/transfer/wire.c \
    module/transfer/wire.h module/transfer/ghash.c module/transfer/ghash.h
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_wire.c tests/fuzz/fuzz_main.c module/transfer/wire.c \
	    module/transfer/ghash.c -lcrypto -o $@

# The patched redis-benchmark --rdma and redis-cli --rdma (built from the
# installed version's source).
REDIS_BENCH_RDMA := build/redis-benchmark-rdma
REDIS_CLI_RDMA := build/redis-cli-rdma
$(REDIS_BENCH_RDMA): bench/redis-benchmark-rdma.patch $(CLIENT_A)
	bench/build-redis-benchmark.sh redis-benchmark
$(REDIS_CLI_RDMA): bench/redis-cli-rdma.patch $(CLIENT_A)
	bench/build-redis-benchmark.sh redis-cli
redis-cli-rdma: $(REDIS_CLI_RDMA)

test-programs: all $(UNIT_TESTS) $(TEST_PROGS)

# ---- tests ------------------------------------------------------------------------
test: ensure-deps
	tests/run-all.sh
# Every suite at full length (the whole server suite on every server and under
# ASan/UBSan too); docs/testing.md#ci says what the gate (make test) trims.
test-full: ensure-deps
	FULL=1 tests/run-all.sh

test-unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t; done


# The TCP stream reassembly's target: the same frames and payload bytes however
# the stream is cut, nothing written past a payload's destination.
FUZZ_FRAMER := build/fuzz/fuzz_framer_standalone
$(FUZZ_FRAMER): tests/fuzz/fuzz_framer.c tests/fuzz/fuzz_gen.h module/transfer/framer.c \
    module/transfer/framer.h module/transfer/wire.c module/transfer/wire.h module/transfer/ghash.c \
    module/transfer/ghash.h
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_CFLAGS) -DFUZZ_STANDALONE tests/fuzz/fuzz_framer.c module/transfer/framer.c \
	    module/transfer/wire.c module/transfer/ghash.c -lcrypto -lxxhash -o $@

# The RDMA stream's control messages and RX/TX arithmetic (Valkey Over RDMA).
FUZZ_STREAMPROTO := build/fuzz/fuzz_streamproto_standalone
$(FUZZ_STREAMPROTO): tests/fuzz/fuzz_streamproto.c tests/fuzz/fuzz_gen.h module/rdma/streamproto.c \
    module/rdma/streamproto.h
	@mkdir -p $(dir $@)
	$(CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_streamproto.c module/rdma/streamproto.c -o $@

test-fuzz: $(FUZZ_BIN) $(FUZZ_FRAMER) $(FUZZ_STREAMPROTO)
	$(FUZZ_BIN)
	$(FUZZ_FRAMER)
	$(FUZZ_STREAMPROTO)

# PYTEST_ARGS: what pytest runs (default the whole suite), e.g.
# make test-server PYTEST_ARGS="tests/server/test_list.py -x". The launcher
# (tests/lib/objnodes.py) takes the module and test programs from OBJSTORE_BUILD.
PYTEST_ARGS ?= tests/server
# VALGRIND=1: the servers that load the module run under valgrind's memcheck
# (tests/lib/objnodes.py; docs/testing.md#valgrind).
test-server: all $(SERVER_PROGS)
	OBJSTORE_BUILD=$(CURDIR)/$(BUILD) $(if $(filter 1,$(VALGRIND)),OBJSTORE_VALGRIND=1) \
	    /usr/bin/python3 -m pytest -q $(PYTEST_ARGS)

# The RDMA suite: natively on a host with an RDMA device, else in a QEMU
# guest with Soft-RoCE (tests/softroce/); fails loudly if neither can run.
test-rdma: all
	tests/softroce/run.sh tests/rdma/run-in-guest.sh

# Redis protocol over RDMA: the stream endpoint itself (tests/rdma/stream), the
# module's door (tests/rdma/door) and the client library + patched
# redis-benchmark and redis-cli (tests/rdma/client), in one guest.
# Everything is compiled on the host first: the guest's CPU is emulated.
test-rdma-resp: all $(RDMA_PROGS) $(REDIS_BENCH_RDMA) $(REDIS_CLI_RDMA) $(VALKEY_RDMA_TEST)
	tests/softroce/run.sh 'r=0; tests/rdma/stream/run-in-guest.sh || r=1; \
	    tests/rdma/door/run-in-guest.sh || r=1; \
	    tests/rdma/client/run-in-guest.sh || r=1; \
	    tests/rdma/valkey/run-in-guest.sh || r=1; exit $$r'
# What every Soft-RoCE suite needs built on the host (make servers first).
softroce-programs: all $(RDMA_PROGS) $(REDIS_BENCH_RDMA) $(REDIS_CLI_RDMA) $(VALKEY_RDMA_TEST)
# Every Soft-RoCE suite CI runs (plain and with the ASan/UBSan module, so build
# SAN=address test-programs first), in one boot of the guest; one line per suite.
test-softroce: softroce-programs
	OBJ_SAN_LIB=$$($(CC) -print-file-name=libasan.so) tests/softroce/run.sh tests/softroce/suites.sh
# Interop with Valkey 8.1.1's built-in RDMA (make servers first): our clients
# against valkey-server, Valkey's own RDMA test client against our door.
test-rdma-valkey: all $(RDMA_PROGS) $(REDIS_BENCH_RDMA) $(REDIS_CLI_RDMA) $(VALKEY_RDMA_TEST)
	tests/softroce/run.sh tests/rdma/valkey/run-in-guest.sh

# Prints the LD_PRELOAD a sanitizer build of the module needs inside redis-server.
SAN_RUNTIME := $(if $(filter address,$(SAN)),asan,$(SAN))
san-preload:
	@$(CC) -print-file-name=lib$(SAN_RUNTIME).so

# ---- lint -----------------------------------------------------------------------
LINT_FILES := $(shell git ls-files '*.c' '*.h' 2>/dev/null)
lint: lint-layers
	clang-format --dry-run --Werror $(LINT_FILES)
# Which component may include which (tests/lint/layers), no circle between .c files
# through their functions and globals (tests/lint/file_circles.py), every relative
# link of the Markdown files, docs/benchmarks.md's tables against bench/results/
# (bench/tables.py), the error code words of the README, docs/commands.md and the
# Python client against module/common/errwords.h, and the checks' own tests.
lint-layers:
	/usr/bin/python3 tests/lint/check_layers.py
	/usr/bin/python3 tests/lint/check_links.py
	/usr/bin/python3 bench/tables.py --check
	/usr/bin/python3 tests/lint/check_errwords.py
	/usr/bin/python3 -m pytest -q tests/lint
format:
	clang-format -i $(LINT_FILES)

clean:
	rm -rf $(BUILD)
distclean:
	rm -rf build

# ---- other servers ------------------------------------------------------------------
# The servers the module must load into besides the installed Redis 7.0, built
# from Debian 13's source packages into a cache outside the checkout (reused
# when present; tests/servers/build-server.sh). Run the server suite on one:
#   make test-server OBJSTORE_SERVER=$(SERVERS_CACHE)/valkey-8.1.1/bin/valkey-server
servers:
	OBJSTORE_SERVERS_CACHE=$(SERVERS_CACHE) tests/servers/build-server.sh redis 8.0.2
	OBJSTORE_SERVERS_CACHE=$(SERVERS_CACHE) tests/servers/build-server.sh valkey 8.1.1
# Valkey's own RDMA test client (tests/rdma/rdma-test.c of the cached
# source), run against our door by tests/rdma/valkey/run-in-guest.sh.
$(VALKEY_RDMA_TEST): $(SERVERS_CACHE)/valkey-8.1.1/src/tests/rdma/rdma-test.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -w -o $@ $< -lrdmacm -libverbs -lpthread

# Redis's own unit tests (build/redis-src: the installed server's version) in
# external mode, without and then with the module (tests/redis-suite/run.sh;
# skipped tests and why: tests/redis-suite/known-incompatible.txt). Another
# server with its own tests: REDIS_SUITE_SRC=$(SERVERS_CACHE)/redis-8.0.2/src
# OBJSTORE_SERVER=$(SERVERS_CACHE)/redis-8.0.2/bin/redis-server make test-redis-suite
test-redis-suite: all
	tests/redis-suite/run.sh

# ---- bench ------------------------------------------------------------------------
# `make bench` prints the table and writes bench/results/bench-tcp.csv + plots.
bench: ensure-deps all
	bench/compare-tcp.sh

# ---- the Python package (client/python/) -----------------------------------------
# `make python`: a venv that sees Debian's numpy and torch (--system-site-packages)
# with the package pip-installed from client/python, linked against the normal
# build's libobjstore.a, also under SAN= (the tests then run the sanitizer module in
# the servers and an uninstrumented client in Python). `make test-python` runs
# tests/python; PYTHON_PYTEST_ARGS narrows it.
PY_VENV  := build/python-venv
PY_STAMP := $(PY_VENV)/.objstore-installed
PY_SRC   := $(wildcard client/python/src/*.[ch] client/python/objstore/*.py \
                       client/python/objstore/*.pyi) client/python/setup.py client/objstore.h \
            client/objclient_int.h module/common/errwords.h
PYTHON_PYTEST_ARGS ?= tests/python
.PHONY: python test-python test-python-rdma
# Always through a make without SAN, where build/client/libobjstore.a has its rule (so a
# changed client library reinstalls the package).
python:
	$(MAKE) SAN= $(PY_STAMP)
$(PY_STAMP): $(PY_SRC) build/client/libobjstore.a
	test -x $(PY_VENV)/bin/python || /usr/bin/python3 -m venv --system-site-packages $(PY_VENV)
	OBJSTORE_ROOT=$(CURDIR) OBJSTORE_BUILD=$(CURDIR)/build $(PY_VENV)/bin/python -m pip install \
	    -q --no-build-isolation --no-index --no-deps --force-reinstall ./client/python
	touch $@
# `python` runs after `all` (not beside it under -j: both would build the client library).
test-python: all
	$(MAKE) python
	OBJSTORE_BUILD=$(CURDIR)/$(BUILD) $(PY_VENV)/bin/python -m pytest -q $(PYTHON_PYTEST_ARGS)
# `make python-san`: the package again with its extension under ASan/UBSan, linked
# against build/san-address/client/libobjstore.a, in a second venv
# (build/san-address/python-venv). `make test-python-san` runs PYTHON_SAN_ARGS with that
# interpreter, libasan preloaded (an instrumented extension needs it first in the
# process) and the ASan/UBSan servers: by default the tests of what a writer controls
# and the metadata fuzzer (tests/fuzz/fuzz_pymeta.py, PYMETA_CASES cases).
PY_SAN_VENV  := build/san-address/python-venv
PY_SAN_STAMP := $(PY_SAN_VENV)/.objstore-installed
PY_SAN_FLAGS := $(SAN_FLAGS) -g
PY_SAN_LIB    = $(shell $(CC) -print-file-name=libasan.so)
# libstdc++ beside libasan: else ASan cannot find the real __cxa_throw when torch throws.
PY_SAN_CXX    = $(shell $(CC) -print-file-name=libstdc++.so.6)
PY_SAN_ENV    = OBJSTORE_BUILD=$(CURDIR)/build/san-address OBJSTORE_PRELOAD=$(PY_SAN_LIB) \
                LD_PRELOAD="$(PY_SAN_LIB) $(PY_SAN_CXX)" \
                ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
PYTHON_SAN_ARGS ?= tests/python/test_writer_metadata.py tests/python/test_seal_race.py \
                   tests/python/test_fork_views.py tests/python/test_zero_copy.py
PYMETA_CASES ?= 600
.PHONY: python-san test-python-san
python-san:
	$(MAKE) SAN=address build/san-address/client/libobjstore.a
	$(MAKE) SAN= $(PY_SAN_STAMP)
$(PY_SAN_STAMP): $(PY_SRC) build/san-address/client/libobjstore.a
	test -x $(PY_SAN_VENV)/bin/python || /usr/bin/python3 -m venv --system-site-packages $(PY_SAN_VENV)
	CFLAGS="$(PY_SAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" OBJSTORE_ROOT=$(CURDIR) \
	    OBJSTORE_BUILD=$(CURDIR)/build/san-address $(PY_SAN_VENV)/bin/python -m pip install \
	    -q --no-build-isolation --no-index --no-deps --force-reinstall ./client/python
	touch $@
test-python-san:
	$(MAKE) SAN=address all
	$(MAKE) python-san
	$(PY_SAN_ENV) $(PY_SAN_VENV)/bin/python -m pytest -q -p no:faulthandler $(PYTHON_SAN_ARGS)
	$(PY_SAN_ENV) $(PY_SAN_VENV)/bin/python tests/fuzz/fuzz_pymeta.py -n $(PYMETA_CASES)
# The package over RDMA (rdma-client-port), on a device or in the Soft-RoCE guest.
test-python-rdma: all
	$(MAKE) python
	tests/softroce/run.sh tests/python/rdma-in-guest.sh

# ---- chaos ------------------------------------------------------------------------
# Nodes in network namespaces under random faults (tests/chaos; needs root, ip, tc),
# and the namespace harness's own tests. CHAOS_SECONDS (default 180), CHAOS_SEED;
# the report goes to $(BUILD)/chaos/report.json. CHAOS_ARGS: what pytest runs, e.g.
# CHAOS_ARGS=tests/chaos/test_netns.py. With SAN=address, set OBJSTORE_PRELOAD to
# libasan as tests/run-all.sh does.
CHAOS_SECONDS ?= 180
CHAOS_ARGS ?= tests/chaos
.PHONY: test-chaos
test-chaos: all
	OBJSTORE_BUILD=$(CURDIR)/$(BUILD) CHAOS_SECONDS=$(CHAOS_SECONDS) \
	    /usr/bin/python3 -m pytest -q $(CHAOS_ARGS)
