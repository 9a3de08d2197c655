"""A node shuts down cleanly while directory lookups are still in flight.

The directory client answers every lookup it still holds when it stops (with
an error), and those answers go to the transfer engine. So the directory
must stop before the engine: the other way round, the answers are written to
the engine's wake-up descriptor after it was closed (or, worse, to whatever
descriptor got its number next), and the queued work leaks.
"""

import os
import signal
import time


def test_shutdown_with_lookups_in_flight_writes_nothing_to_a_closed_engine(make_cluster):
    cl = make_cluster(names=("A", "B"), layout="separate")
    os.kill(cl.dir.proc.pid, signal.SIGSTOP)  # lookups now wait for a reply
    try:
        # Fetches that block their clients: issue them without waiting for replies.
        conns = []
        for i in range(8):
            c = cl["B"].client()
            c.connection_pool.get_connection("OBJ.FETCH").send_command(
                "OBJ.FETCH", f"pending:{i}", "TIMEOUT", 30000)
            conns.append(c)
        time.sleep(0.5)
        problems = cl["B"].stop()
    finally:
        os.kill(cl.dir.proc.pid, signal.SIGCONT)
    log = cl["B"].log()
    assert "cannot wake the engine" not in log, log[-3000:]
    assert not problems, problems
