# objstore - top-level build.
#
#   make            module/objstore.so, client library (static, shared, .pc), examples
#   make run        one node on 127.0.0.1:6379 (installs what it needs first)
#   make test       unit + integration + sanitizer suites (installs what it needs first)
#   make lint       clang-format check
#   make deps       install the Debian packages the project needs
#   SAN=address     build with ASan/UBSan        DEBUG=1   -O0 -g, extra checks
#   REDIS_SRC=/path take redismodule.h from a Redis source tree

CC      ?= cc
PORT    ?= 6379
SAN     ?=
DEBUG   ?=
# A sanitizer build lives apart so that it never replaces the normal module.
ifeq ($(SAN),)
BUILD   := build
MODULE  := module/objstore.so
else
BUILD   := build/san-$(SAN)
MODULE  := $(BUILD)/objstore.so
endif

CFLAGS  := -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC -pthread \
           -D_GNU_SOURCE -Ibuild/include -Imodule -Iclient
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

# Pure logic (no redismodule.h): linked into the module and the unit tests.
CORE_SRC := module/alloc.c module/objtable.c module/arena.c module/util.c module/wire.c \
            module/directory.c module/engine.c module/fetch.c module/serve.c module/tcp.c \
            module/ring.c module/verbs.c \
            module/rdma.c module/resp.c
# Redis-facing layer.
MOD_SRC  := module/module.c module/commands.c module/waiters.c module/config.c module/cluster.c \
            module/respserver.c
CORE_LIBS := -lxxhash -lhiredis -lcrypto -lrdmacm -libverbs
# redis-server exports its own bundled (newer, incompatible) hiredis: link ours
# statically and keep its symbols local, so the module never binds to that copy.
MOD_LIBS := -Wl,--exclude-libs,libhiredis.a -Wl,-Bstatic -lhiredis -Wl,-Bdynamic \
            -lxxhash -lcrypto -lrdmacm -libverbs
# objstore_rdma.c/rdmaconn.c: ObjClient over RDMA (objClientConnectRdma); a
# static link that never calls it needs neither them nor the RDMA libraries.
CLI_SRC  := client/objstore.c client/objstore_rdma.c client/rdmaconn.c module/ring.c
CLI_LIBS := -lhiredis -lrdmacm -libverbs

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
MOD_OBJ  := $(MOD_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
EXAMPLES   := $(patsubst client/examples/%.c,client/examples/%,$(wildcard client/examples/*.c))

.PHONY: all deps run test test-unit test-integration test-fuzz test-rdma test-rdma-resp lint format bench clean distclean
all: $(MODULE) client/libobjstore.a client/libobjstore.so client/objstore.pc $(EXAMPLES)

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
.PHONY: ensure-deps

# ---- redismodule.h from the Redis source package ------------------------------
build/include/redismodule.h:
	@mkdir -p build/include
	@if [ -n "$(REDIS_SRC)" ]; then cp "$(REDIS_SRC)/src/redismodule.h" $@; \
	else tests/fetch-redismodule-h.sh build && cp build/redis-src/src/redismodule.h $@; fi

# ---- objects ------------------------------------------------------------------
$(BUILD)/%.o: %.c | build/include/redismodule.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(shell find $(BUILD) -maxdepth 3 -name '*.d' 2>/dev/null)

# Only RedisModule_OnLoad leaves the module: nothing of ours can collide with
# (or be bound to) a symbol of redis-server.
$(CORE_OBJ) $(MOD_OBJ): CFLAGS += -fvisibility=hidden

$(MODULE): $(CORE_OBJ) $(MOD_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(MOD_LIBS)

client/libobjstore.a: $(CLI_OBJ)
	ar rcs $@ $^
client/libobjstore.so: $(CLI_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(CLI_LIBS)
client/objstore.pc: client/objstore.pc.in
	sed -e 's|@PREFIX@|$(CURDIR)|' $< > $@
client/examples/%: client/examples/%.c client/libobjstore.a
	$(CC) $(CFLAGS) -o $@ $< client/libobjstore.a $(LDFLAGS) $(CLI_LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(CORE_OBJ) $(LDFLAGS) -lcmocka $(CORE_LIBS)

# ---- run ------------------------------------------------------------------------
run: ensure-deps all
	redis-server conf/single-node.conf --port $(PORT) --loadmodule $(CURDIR)/module/objstore.so

# ---- tests ------------------------------------------------------------------------
test: ensure-deps
	tests/run-all.sh

test-unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t; done

# The wire decoder's standalone fuzz driver, under ASan/UBSan.
FUZZ_BIN := build/fuzz/fuzz_wire_standalone
$(FUZZ_BIN): tests/fuzz/fuzz_wire.c tests/fuzz/fuzz_main.c module/wire.c module/wire.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -O1 -g -D_GNU_SOURCE -Imodule -Itests/fuzz -fsanitize=address,undefined \
	    -fno-sanitize-recover=undefined -fno-omit-frame-pointer tests/fuzz/fuzz_wire.c \
	    tests/fuzz/fuzz_main.c module/wire.c -lcrypto -o $@
test-fuzz: $(FUZZ_BIN)
	$(FUZZ_BIN)

test-integration: all
	OBJSTORE_MODULE=$(CURDIR)/$(MODULE) /usr/bin/python3 -m pytest -q tests/integration

# The RDMA suite: natively on a host with an RDMA device, else in a QEMU
# guest with Soft-RoCE (tests/softroce/); fails loudly if neither can run.
test-rdma: all
	tests/softroce/run.sh tests/rdma/run-in-guest.sh

# Redis protocol over RDMA: the module's front door (tests/rdmaresp) and the
# client library + patched redis-benchmark (tests/rdmaclient), in one guest.
# Everything is compiled on the host first: the guest's CPU is emulated.
RESP_CLIENT := build/rdmaresp/rdma_resp_client
$(RESP_CLIENT): tests/rdmaresp/rdma_resp_client.c module/ring.c module/ring.h module/resprdma.h
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=gnu11 -Wall -D_GNU_SOURCE -Imodule $< module/ring.c \
	    -lrdmacm -libverbs -lhiredis -o $@
test-rdma-resp: all $(RESP_CLIENT)
	tests/rdmaclient/build.sh
	tests/softroce/run.sh 'r=0; tests/rdmaresp/run-in-guest.sh || r=1; \
	    tests/rdmaclient/run-in-guest.sh || r=1; exit $$r'

# Prints the LD_PRELOAD a sanitizer build of the module needs inside redis-server.
san-preload:
	@$(CC) -print-file-name=lib$(SAN).so

# ---- lint -----------------------------------------------------------------------
LINT_FILES := $(shell git ls-files '*.c' '*.h' 2>/dev/null)
lint:
	clang-format --dry-run --Werror $(LINT_FILES)
format:
	clang-format -i $(LINT_FILES)

clean:
	rm -rf $(BUILD) module/*.so client/*.a client/*.so client/*.pc $(EXAMPLES)
distclean: clean

# ---- bench ------------------------------------------------------------------------
# obj-benchmark (redis-benchmark-style load generator) and the host comparison
# suite; `make bench` prints the table and writes bench/results/bench-tcp.csv + plots.
BENCH_TOOLS := bench/obj-benchmark
.PHONY: bench-tools
bench-tools: $(BENCH_TOOLS)
bench/obj-benchmark: bench/obj-benchmark.c client/objstore.h client/libobjstore.a
	$(CC) $(CFLAGS) -o $@ $< client/libobjstore.a $(LDFLAGS) $(CLI_LIBS) -lxxhash -pthread -lm
bench: ensure-deps all bench-tools
	bench/compare-tcp.sh
.PHONY: bench-clean
clean: bench-clean
bench-clean:
	rm -f $(BENCH_TOOLS)
# ---- end bench --------------------------------------------------------------------
