"""Measured facts about /dev/shm for a worker that ran out of shared memory: one that died of
SIGBUS (torch 1.x writes a batch into a /dev/shm segment the tmpfs cannot back), or torch 2.x's
"unable to allocate shared memory(shm) ... No space left on device".

DataLoader workers put each batch's tensors in /dev/shm; the loader keeps up to
``num_workers`` x ``prefetch_factor`` batches there ahead of the one the program uses. A
container's /dev/shm is 64 MiB unless ``--shm-size`` says otherwise.

Imports nothing at run time (its callers run in a Pool's helper threads too).
"""
import math
import os


SHM = "/dev/shm"
_MIB = 1024 * 1024
_ENOSPC = "No space left on device"


def usage(path=SHM):
    """(size, used) of the file system at ``path`` in bytes, or None where it cannot be read
    (no /dev/shm: macOS, Windows)."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    size = st.f_blocks * st.f_frsize
    return (size, size - st.f_bavail * st.f_frsize) if size else None


def is_shm_error(exc):
    """Whether ``exc`` is torch's failure to allocate a shared-memory segment for lack of
    space."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and _ENOSPC in text and "shared memory" in text


def failed_allocation(tb):
    """The bytes the failed allocation asked for, read from traceback ``tb`` of
    :func:`is_shm_error`'s error (torch's ``UntypedStorage._new_shared(size)``), or None."""
    size = None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "_new_shared" and isinstance(frame.f_locals.get("size"), int):
            size = frame.f_locals["size"]  # the innermost: the untyped storage's, in bytes
        tb = tb.tb_next
    return size


def _mib(size):
    return "%.1f MiB" % (size / float(_MIB))


def shm_lines(workers=None, prefetch_factor=None, batch_bytes=None, measured=None):
    """Lines on /dev/shm at the failure: its size and use (``measured``: (size, used) taken
    when the failure was seen, else read now), what one batch needed (``batch_bytes``, when
    measured), what a loader of ``workers`` x ``prefetch_factor`` holds at once, and the fix
    with numbers (``--shm-size``, ``--ipc=host``, the sharing strategy). [] where there is no
    /dev/shm to measure. Never raises."""
    try:
        return _lines(workers, prefetch_factor, batch_bytes, measured or usage())
    except Exception:
        return []


def _lines(workers, prefetch_factor, batch_bytes, measured):
    if measured is None:
        return []
    size, used = measured
    lines = ["%s: %s in all, %s of it in use (%s free) when the failure was seen." % (
        SHM, _mib(size), _mib(used), _mib(size - used))]
    if batch_bytes:
        lines.append("The shared-memory allocation that failed asked for %s (the tensors of "
                     "one batch, which a worker puts in %s to send it)." % (_mib(batch_bytes),
                                                                          SHM))
    held = workers * prefetch_factor if workers and prefetch_factor else None
    if held:
        lines.append("The loader keeps up to %d batches in %s at once (num_workers=%d x "
                     "prefetch_factor=%d), and the one the program is using%s." % (
                         held, SHM, workers, prefetch_factor,
                         ": %s" % _mib((held + 1) * batch_bytes) if batch_bytes else ""))
    if held and batch_bytes:
        fits = int(math.ceil((held + 1) * batch_bytes * 1.25 / _MIB))  # 25% for the rest
        lines.append("Fix: a %s of at least %d MiB: `docker run --shm-size=%dm` (Kubernetes: "
                     "an emptyDir volume with medium: Memory and sizeLimit: %dMi on %s), or "
                     "`docker run --ipc=host` to use the host's; or fewer workers, a smaller "
                     "prefetch_factor or smaller batches." % (SHM, fits, fits, fits, SHM))
    else:
        lines.append("Fix: a larger %s: `docker run --shm-size=...` of at least (num_workers "
                     "x prefetch_factor + 1) x one batch's size, plus a quarter, or `docker "
                     "run --ipc=host` to use the host's; or fewer workers, a smaller "
                     "prefetch_factor or smaller batches." % SHM)
    lines.append("torch.multiprocessing.set_sharing_strategy('file_system') does not help "
                 "here: it changes how segments are named and passed (against running out of "
                 "file descriptors), and both strategies keep them in %s." % SHM)
    return lines
