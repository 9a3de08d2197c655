/*
 * serversyms.h - every symbol of redis-server that conntype.c uses, one
 * DOOR_SERVER_SYM(name) line each: the one list of the door's imports from
 * the server's internals.
 *
 * The Makefile makes these references weak in conntype.o (objcopy
 * --weaken-symbols), so that objstore-rdma.so still loads into a server
 * that lacks them (Valkey, another Redis) far enough to refuse with a clear
 * message instead of a dynamic linker error; door.c checks at load that
 * each one is there before anything touches them. A symbol conntype.c
 * starts using must be added here: tests/server/test_symbols.py fails when
 * objstore-rdma.so has a strong reference that none of its libraries
 * defines.
 */
DOOR_SERVER_SYM(DefaultUser)
DOOR_SERVER_SYM(_serverLog)
DOOR_SERVER_SYM(aeCreateFileEvent)
DOOR_SERVER_SYM(aeCreateTimeEvent)
DOOR_SERVER_SYM(aeDeleteFileEvent)
DOOR_SERVER_SYM(aeDeleteTimeEvent)
DOOR_SERVER_SYM(anetNonBlock)
DOOR_SERVER_SYM(authRequired)
DOOR_SERVER_SYM(connGetPrivateData)
DOOR_SERVER_SYM(connGetState)
DOOR_SERVER_SYM(createClient)
DOOR_SERVER_SYM(freeClient)
DOOR_SERVER_SYM(freeClientAsync)
DOOR_SERVER_SYM(getClusterConnectionsCount)
DOOR_SERVER_SYM(moduleFireServerEvent)
DOOR_SERVER_SYM(server)
DOOR_SERVER_SYM(zcalloc)
DOOR_SERVER_SYM(zfree)
