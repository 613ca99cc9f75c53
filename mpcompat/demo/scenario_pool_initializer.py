"""A Pool whose initializer raises: it opens a database file that does not exist.

``multiprocessing.Pool`` replaces every worker that exits, whatever the reason, so when the
initializer fails (a wrong path, a missing credential) each new worker fails the same way: the
workers print their traceback over and over and ``map()`` never returns. With mpcompat the Pool
gives up after a few failed workers, and ``map()`` raises ``BrokenPool`` naming the workers'
own error. That error cannot be fixed for the user, so with mpcompat ``run()`` returns it.
"""
TITLE = "Pool(initializer=open_db) where the database file does not exist"
ORDER = 45
NEEDS = ()
TIMEOUT = 15

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


def summarize(exc, seconds):
    """One line: the error ``map()`` raised and the workers' own error, from its note."""
    text = "\n".join([str(exc)] + [n for n in getattr(exc, "__notes__", None) or ()
                                   if n not in str(exc)])
    marker = "failed while starting: "
    lines = text.splitlines()
    cause = None
    for index, line in enumerate(lines):
        if marker in line:
            cause = line.split(marker, 1)[1].strip()
            step = lines[index + 1].strip() if index + 1 < len(lines) else ""
            if step.startswith("(while "):
                cause += " " + step
            break
    if cause is None:
        return None
    return "map() raised %s after %.1f s, naming the workers' error: %s" % (
        type(exc).__name__, seconds, cause)


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
            values = pool.map(lookup, range(8), chunksize=1)
        except Exception as exc:
            summary = summarize(exc, time.time() - start)
            if summary is None:
                raise
            return summary
    return "%d values looked up" % len(values)
