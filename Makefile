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
BUILD   := build
SAN     ?=
DEBUG   ?=

CFLAGS  := -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -fPIC -pthread \
           -D_GNU_SOURCE -I$(BUILD)/include -Imodule -Iclient
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
CORE_SRC := module/alloc.c module/objtable.c module/arena.c module/util.c
# Redis-facing layer.
MOD_SRC  := module/module.c module/commands.c module/waiters.c module/config.c
MOD_LIBS := -lxxhash -lhiredis
CLI_SRC  := client/objstore.c
CLI_LIBS := -lhiredis

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
MOD_OBJ  := $(MOD_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)

UNIT_TESTS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(wildcard tests/unit/test_*.c))
EXAMPLES   := $(patsubst client/examples/%.c,client/examples/%,$(wildcard client/examples/*.c))

.PHONY: all deps run test test-unit test-integration test-san lint format bench clean distclean
all: module/objstore.so client/libobjstore.a client/libobjstore.so client/objstore.pc $(EXAMPLES)

# ---- dependencies -----------------------------------------------------------
# A marker per dependency set: `make run`/`make test` call deps only when the
# tools are missing, so a fresh machine needs nothing but make.
DEPS_OK := $(shell command -v redis-server >/dev/null && command -v pkg-config >/dev/null && \
             pkg-config --exists hiredis && test -f /usr/include/xxhash.h && \
             test -f /usr/include/cmocka.h && /usr/bin/python3 -c 'import pytest, redis' \
             2>/dev/null && echo yes)
deps:
	tests/install-deps.sh
ifeq ($(DEPS_OK),yes)
ensure-deps: ;
else
ensure-deps: deps
endif
.PHONY: ensure-deps

# ---- redismodule.h from the Redis source package ------------------------------
$(BUILD)/include/redismodule.h:
	@mkdir -p $(BUILD)/include
	@if [ -n "$(REDIS_SRC)" ]; then cp "$(REDIS_SRC)/src/redismodule.h" $@; \
	else tests/fetch-redismodule-h.sh $(BUILD) && cp $(BUILD)/redis-src/src/redismodule.h $@; fi

# ---- objects ------------------------------------------------------------------
$(BUILD)/%.o: %.c | $(BUILD)/include/redismodule.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

module/objstore.so: $(CORE_OBJ) $(MOD_OBJ)
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
	$(CC) $(CFLAGS) -o $@ $< $(CORE_OBJ) $(LDFLAGS) -lcmocka -lxxhash

# ---- run ------------------------------------------------------------------------
run: ensure-deps all
	redis-server conf/single-node.conf --port $(PORT) --loadmodule $(CURDIR)/module/objstore.so

# ---- tests ------------------------------------------------------------------------
test: ensure-deps
	tests/run-all.sh

test-unit: $(UNIT_TESTS)
	@set -e; for t in $(UNIT_TESTS); do echo "== $$t"; $$t; done

test-integration: all
	/usr/bin/python3 -m pytest -q tests/integration

# ---- lint -----------------------------------------------------------------------
LINT_FILES := $(shell git ls-files '*.c' '*.h' 2>/dev/null)
lint:
	clang-format --dry-run --Werror $(LINT_FILES)
format:
	clang-format -i $(LINT_FILES)

clean:
	rm -rf $(BUILD) module/*.so client/*.a client/*.so client/*.pc $(EXAMPLES)
distclean: clean
