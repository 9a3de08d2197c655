/*
 * broadcast_client.c - objClientBroadcast (client/objstore.h) from the
 * command line, for tests/server/test_broadcast_client.py: place one object
 * on a list of nodes and print each node's outcome by name.
 *
 * Usage: broadcast_client ID TIMEOUT_MS NAME=PORT... (nodes on 127.0.0.1).
 * Prints "NAME OK" or "NAME FAIL <error text>" per node, in order. Exits 0
 * when the call reported success, 1 when it reported a failure, and 2 on a
 * usage error or when its return value disagrees with the per-node outcomes
 * (success must mean that every node holds the object).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

int main(int argc, char **argv)
{
    int n = argc - 3, allOk = 1;

    if (argc < 4) {
        fprintf(stderr, "usage: %s ID TIMEOUT_MS NAME=PORT...\n", argv[0]);
        return 2;
    }
    ObjBroadcastDest *dests = calloc((size_t)n, sizeof(*dests));
    if (!dests)
        return 2;
    for (int i = 0; i < n; i++) {
        char *eq = strchr(argv[3 + i], '=');
        if (!eq) {
            fprintf(stderr, "not NAME=PORT: %s\n", argv[3 + i]);
            return 2;
        }
        *eq = '\0';
        dests[i].name = argv[3 + i];
        dests[i].client = objClientConnect("127.0.0.1", atoi(eq + 1));
    }
    int rv = objClientBroadcast(dests, (size_t)n, argv[1], strlen(argv[1]), atoll(argv[2]));
    for (int i = 0; i < n; i++) {
        if (dests[i].err == OBJ_OK) {
            printf("%s OK\n", dests[i].name);
        } else {
            allOk = 0;
            printf("%s FAIL %s\n", dests[i].name, dests[i].errMsg);
        }
        objClientFree(dests[i].client);
    }
    free(dests);
    if ((rv == 0) != allOk) {
        fprintf(stderr, "objClientBroadcast returned %d, but the nodes say %s\n", rv,
                allOk ? "all OK" : "not all OK");
        return 2;
    }
    return rv == 0 ? 0 : 1;
}
