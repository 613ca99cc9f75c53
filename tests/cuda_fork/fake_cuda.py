"""A CUDA start on a machine without a GPU, for the tests of ``torch.cuda_fork`` only.

Import it before torch. When ``torch._C`` loads, it gets what ``torch.cuda._lazy_init`` needs to
take the path of a CUDA build (``_cuda_getDeviceCount``, ``_cudart``) and a ``_cuda_init`` that
does what torch's own does to fork children and nothing else: every child forked after it is in
a "bad fork" (``_cuda_isInBadFork``, read by torch.cuda as it is imported). torch 1.9.1+cu102
has the real functions: they are replaced, since they need a driver. Nothing else changes: the
first start goes through ``torch._C._cuda_init`` as on a GPU machine, and a child's
``torch.ones(2, device="cuda")`` reaches torch's ``_lazy_init`` from C++ as there.

Only starts made in Python are simulated (``torch.cuda.init()``, ``current_device()``): a
``.cuda()`` would start CUDA the same way, then fail to allocate.
"""
import os
import sys
import types

_fork = {"poisoned": False, "bad": False}


def _cuda_init():
    if not _fork["poisoned"]:  # torch's C++ registers its fork handler once, as it starts
        _fork["poisoned"] = True
        os.register_at_fork(after_in_child=_in_child)


def _in_child():
    _fork["bad"] = True


def _simulate(c_module):
    c_module._cuda_init = _cuda_init
    c_module._cuda_getDeviceCount = lambda: 0  # no device: torch's checks at the start loop none
    c_module._cuda_isInBadFork = lambda: _fork["bad"]
    c_module._cuda_getDevice = lambda: 0
    if not hasattr(c_module, "_cudart"):
        c_module._cudart = types.ModuleType("torch._C._cudart")


class _Loader(object):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _simulate(module)


class _Finder(object):
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "torch._C":
            return None
        from importlib.machinery import PathFinder
        spec = PathFinder.find_spec(name, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if "torch" in sys.modules:
    raise RuntimeError("import fake_cuda before torch")
sys.meta_path.insert(0, _Finder)
