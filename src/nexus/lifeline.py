"""A worker process that ends the moment the process that started it ends, however that one ends.

A `kill -9` of a parent (nexus data prepare, a study runner) must not leave its workers alive, writing shards or
training runs, holding the caller's pipes. A worker's own parent may be a multiprocessing forkserver rather than the
process that asked for it, so PR_SET_PDEATHSIG is not enough; a pidfd (Linux >= 5.3) becomes readable exactly when
`pid` exits, and elsewhere a 1 s poll stands in. Written by hand: multiprocessing has no such option.
"""

from __future__ import annotations

import os
import threading
import time


def die_with(pid: int) -> None:
    """End this process (exit status 1) as soon as process `pid` has ended; watched by a daemon thread."""

    def watch() -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            os._exit(1)  # already gone
        except (AttributeError, OSError):
            fd = None
        if fd is not None:
            import select

            select.select([fd], [], [])
            os._exit(1)
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="nexus-die-with-parent", daemon=True).start()
