"""The standard library's patches where the patch manager has not loaded (the installed wheel,
nothing imported before): ``python standard_patches.py START_METHOD [decline]``. A Pool of that
start method runs a task; with ``decline``, ``multiprocessing.reduction`` first loses ``dump``
(a Python without what ``multiprocessing.pickling_notes`` hooks; a fork Pool does not use it).
Prints one JSON line: mpcompat's modules in this process and in the worker after the task,
status()'s rows of the standard library's patches, and whether ``Pool.__init__`` is the
standard library's own after ``mpcompat.deactivate()``."""
import json
import sys


def modules():
    """mpcompat's modules loaded in this process."""
    return sorted(name for name in sys.modules if "mpcompat" in name)


def main():
    import multiprocessing.pool
    if "decline" in sys.argv:
        import multiprocessing.reduction
        del multiprocessing.reduction.dump
    with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
        worker = pool.apply(modules)
    parent = modules()
    import mpcompat
    rows = [[row.name, row.state, row.reason] for row in mpcompat.status().patches
            if row.name.startswith(("multiprocessing.", "concurrent_futures."))]
    mpcompat.deactivate()
    init = multiprocessing.pool.Pool.__init__
    restored = init.__module__ == "multiprocessing.pool" and not hasattr(init, "__wrapped__")
    print(json.dumps({"parent": parent, "worker": worker, "rows": rows, "restored": restored}))


if __name__ == "__main__":
    main()
