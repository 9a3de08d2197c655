/*
 * start.c - engineStart (engine.h): the one place that knows which sides the
 * engine runs, so that the core (engine.c) names none, and the sides
 * (fetch.c, serve.c, repl.c) call the core without the core calling them by
 * name.
 */
#include "engine.h"
#include "engineint.h"
#include "fetch.h"
#include "repl.h"
#include "serve.h"

int engineStart(const EngineConfig *cfg, char *err, size_t errLen)
{
    /* The requesting side first: it has always been asked first. REPL's
     * last: the fetch side's shutdown ends the fetches REPLs started. */
    static const EngineSide *const sides[] = {&fetchSide, &serveSide, &replSide};

    return engineStartWith(cfg, sides, (int)(sizeof(sides) / sizeof(sides[0])), err, errLen);
}
