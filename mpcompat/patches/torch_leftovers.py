"""Patch ``torch.leftovers``: the next run names what a killed run left behind.

A failure to listen on the c10d store's port (``EADDRINUSE``) gains a note naming the process
that holds the port (pid, age, orphan or not, command line); CUDA out of memory as a process
starts gains one naming this user's orphans that hold the GPU. What is read from ``/proc``
(``mpcompat.diagnose.leftovers``) loads only when such an error is seen. Hooks, each loaded at
the first call of the function it wraps (the table's ``first_use``):

- ``torch.distributed.rendezvous._create_c10d_store``: where ``init_process_group``'s
  ``tcp://`` and ``env://`` rendezvous make the TCPStore (torch 1.9: ``RuntimeError: Address
  already in use``; 2.x: ``DistNetworkError ... EADDRINUSE``). Its arguments give the port.
- ``torch.distributed.launcher.api.launch_agent``: torchrun's agent, whose rendezvous makes
  its store (the port from torch 2's message, else the rendezvous endpoint).
- ``torch.cuda._lazy_init`` (torch's ``_cuda_init`` failing), and the ``__init__`` of
  ``torch.cuda.OutOfMemoryError`` (torch 1.13+) and ``torch.AcceleratorError`` (in 2.13, not
  2.6: "CUDA error: out of memory"), which torch's C++ instantiates when an allocation fails:
  a note while this process has no tensor on the GPU yet, once per process.

Plain wrappers, not wrapt: they load at a first call on the success path (importing wrapt takes
35-150 ms). Each error keeps its type; the wrappers' frames leave its traceback (from Python
3.11; before, as it is printed uncaught: ``mpcompat.workers.user_frames``).
"""
import functools
import sys

from mpcompat.patcher import Patcher, Skip

patcher = Patcher()
_MARK = "_mpcompat_leftovers"
_oom_seen = []  # a CUDA OOM looked at already: one look per process


def _noted(exc):
    """Mark ``exc`` as looked at; False if it already was."""
    if getattr(exc, "__dict__", {}).get(_MARK):
        return False
    exc.__dict__[_MARK] = True
    return True


def _add(exc, make_note):
    """Add ``PREFIX + make_note()`` to ``exc`` where it says something. Never raises."""
    try:
        text = make_note()
        if text:
            from mpcompat.diagnose.notes import PREFIX, add_note
            add_note(exc, PREFIX + text)
    except Exception:
        pass


def _reraising(original, on_error):
    """``original`` wrapped: an error it raises goes to ``on_error(exc, args, kwargs)``, then
    on, without this wrapper's frame."""
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            if _noted(exc):
                on_error(exc, args, kwargs)
            from mpcompat.workers.user_frames import drop_own_frames
            drop_own_frames(exc)
            raise
    return wrapper


def _port_taken(exc, port):
    """Add who holds the port to ``exc`` where it says the port is in use."""
    from mpcompat.diagnose import leftovers
    in_use, named = leftovers.port_in_use(exc)
    port = named or port
    if in_use and port:
        _add(exc, lambda: leftovers.port_note(int(port)))


def _store_failed(exc, args, kwargs):
    # _create_c10d_store(hostname, port, rank, world_size, timeout, ...) in 1.9.1 and 2.x
    _port_taken(exc, args[1] if len(args) > 1 else kwargs.get("port"))


def _agent_failed(exc, args, kwargs):
    config = args[0] if args else kwargs.get("config")
    endpoint = str(getattr(config, "rdzv_endpoint", "") or "")
    port = endpoint.rpartition(":")[2]
    _port_taken(exc, int(port) if port.isdigit() else None)


def _cuda_failed(exc, args=None, kwargs=None):
    """A CUDA OOM as the process starts (none looked at before, no tensor on the GPU): this
    user's orphans holding the GPU."""
    from mpcompat.diagnose import leftovers
    if _oom_seen or not leftovers.is_cuda_oom(exc):
        return
    _oom_seen.append(True)
    if args is None:  # raised by an allocation: only while nothing is allocated yet
        cuda = sys.modules.get("torch.cuda")
        if cuda is not None and cuda.is_initialized() and cuda.memory_allocated() != 0:
            return
    _add(exc, leftovers.device_note)


def _error_init(original):
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        try:
            if _noted(self):
                _cuda_failed(self)
        except Exception:
            pass
    __init__.__wrapped__ = original
    return __init__


_HOOKS = {
    "torch.distributed.rendezvous": ("_create_c10d_store", _store_failed),
    "torch.distributed.launcher.api": ("launch_agent", _agent_failed),
    "torch.cuda": ("_lazy_init", _cuda_failed),
}


def apply(module):
    """Wrap the function of ``module`` that fails when a port or the GPU is taken."""
    name, on_error = _HOOKS.get(module.__name__, (None, None))
    if not callable(module.__dict__.get(name)):
        raise Skip("%s has no %s" % (module.__name__, name))
    # Before Python 3.11 a wrapper's frame stays in a traceback that is caught and formatted
    # (a DataLoader worker's CUDA-after-fork error, torch.cuda_fork's report): _lazy_init is left
    # alone there, and only the OOM errors' own __init__ names the GPU's holders.
    if module.__name__ != "torch.cuda" or sys.version_info >= (3, 11):
        patcher.replace(module, name, _reraising(patcher.original(module, name), on_error))
    if module.__name__ == "torch.cuda":
        torch = sys.modules["torch"]
        for cls in {getattr(module, "OutOfMemoryError", None),
                    getattr(torch, "AcceleratorError", None)} - {None}:
            patcher.replace(cls, "__init__", _error_init(patcher.original(cls, "__init__")),
                            module.__name__)


def revert(module):
    """Put back the originals where ours are still in place."""
    patcher.restore(module)
