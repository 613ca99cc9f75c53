"""A Pool whose initializer raises: it opens a database file that does not exist.

The Pool replaces each failed worker, so the workers print their traceback over and over and
``map()`` never returns. With mpcompat the Pool gives up after a few failed workers and
``map()`` raises ``BrokenPool`` naming their error, which ``run()`` returns.
"""
import re

TITLE = "Pool(initializer=open_db) where the database file does not exist"
ORDER = 45
NEEDS = ()
TIMEOUT = 15
# What a timeout without mpcompat means here (the demo's words for it).
STUCK = "the Pool kept restarting workers that die in its initializer"

_connection = None


def open_db(path):
    """The initializer: open the database read-only, once per worker."""
    import sqlite3
    global _connection
    _connection = sqlite3.connect("file:%s?mode=ro" % path, uri=True)


def lookup(key):
    """The work of one task: look a key up in the worker's database."""
    row = _connection.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def run():
    """Map over eight keys with a two-worker Pool whose initializer fails."""
    import multiprocessing
    import os
    import tempfile
    import time
    # fork where there is one: the workers inherit the parent's mpcompat as they start
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    path = os.path.join(tempfile.gettempdir(), "mpcompat-demo-missing", "lookup.sqlite")
    start = time.time()
    with multiprocessing.get_context(method).Pool(2, initializer=open_db,
                                                  initargs=(path,)) as pool:
        try:
            # chunksize given: the Pool's own divides by its live workers, none at times here
            return "%d values looked up" % len(pool.map(lookup, range(8), chunksize=1))
        except Exception as exc:
            # the workers' error (and the step it failed in) from the error or its notes
            text = "\n".join([str(exc)] + list(getattr(exc, "__notes__", None) or ()))
            match = re.search(r"failed while starting: (.*)(\n[ \t]*\(while .*)?", text)
            if match is None:
                raise
            return "map() raised %s after %.1f s, naming the workers' error: %s" % (
                type(exc).__name__, time.time() - start,
                " ".join(part.strip() for part in match.groups() if part))
