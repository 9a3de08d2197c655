/*
 * start.c - engineStart (engine.h): the one place that knows which sides the
 * engine runs, so that the core (engine.c) names neither, and the sides
 * (fetch.c, serve.c) call the core without the core calling them by name.
 */
#include "engine.h"
#include "engineint.h"
#include "fetch.h"
#include "serve.h"

int engineStart(const EngineConfig *cfg, char *err, size_t errLen)
{
    /* The requesting side first: it has always been asked first. */
    static const EngineSide *const sides[] = {&fetchSide, &serveSide};

    return engineStartWith(cfg, sides, (int)(sizeof(sides) / sizeof(sides[0])), err, errLen);
}
