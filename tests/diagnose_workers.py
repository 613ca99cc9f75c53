"""Objects and functions for the tests of ``mpcompat.diagnose`` (importable by name in children).

Keep this module importable without torch, numpy, lmdb, h5py or mpcompat: import those inside
functions.
"""
import collections
import functools
import threading


def echo(obj):
    """Return ``obj`` as received."""
    return obj


def add(a, b=0):
    """A module-level function (pickles by reference)."""
    return a + b


LAMBDA = lambda x: x  # noqa: E731 - a module-level lambda, the real thing


Point = collections.namedtuple("Point", "x y")


class Holder(object):
    """Keeps whatever keyword arguments it gets as attributes."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def method(self):
        """A bound method to pickle."""
        return sorted(self.__dict__)


class FileClient(object):
    """mmcv-style file client: keeps a backend client."""

    def __init__(self, client):
        self.client = client


class Transform(object):
    """A pipeline step that may keep a file client."""

    def __init__(self, name, file_client=None):
        self.name, self.file_client = name, file_client

    def __call__(self, sample):
        return sample


class Pipeline(object):
    """A Compose of transforms."""

    def __init__(self, transforms):
        self.transforms = list(transforms)

    def __call__(self, sample):
        for transform in self.transforms:
            sample = transform(sample)
        return sample


class Dataset(object):
    """A map-style dataset that keeps infos and a pipeline."""

    def __init__(self, pipeline, infos=()):
        self.pipeline, self.infos = pipeline, list(infos)

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return self.pipeline(index)


class Loader(object):
    """Something that keeps a dataset, like a DataLoader."""

    def __init__(self, dataset):
        self.dataset = dataset


def deep_loader(client):
    """``loader.dataset.pipeline.transforms[3].file_client.client`` is ``client``."""
    transforms = [Transform("load"), Transform("resize"), Transform("flip"),
                  Transform("read", FileClient(client)), Transform("pack")]
    return Loader(Dataset(Pipeline(transforms)))


def make_local_function():
    """Return a function defined inside this function."""
    def scale(x):
        return 2 * x
    return scale


def make_local_lambda():
    """Return a lambda defined inside this function."""
    return lambda x: x + 1


def make_local_instance():
    """Return an instance of a class defined inside this function."""
    class LocalConfig(object):
        def __init__(self):
            self.size = 3
    return LocalConfig()


class Slotted(object):
    """State in ``__slots__``."""

    __slots__ = ("first", "second")

    def __init__(self, first, second):
        self.first, self.second = first, second


class Renaming(object):
    """Pickles through ``__getstate__``, which renames its attribute."""

    def __init__(self, value):
        self._value = value

    def __getstate__(self):
        return {"value": self._value}

    def __setstate__(self, state):
        self._value = state["value"]


class Reducing(object):
    """Pickles through ``__reduce_ex__`` as ``Reducing(payload)``."""

    def __init__(self, payload):
        self.payload = payload

    def __reduce_ex__(self, protocol):
        return (Reducing, (self.payload,))


class Registered(object):
    """Pickled only through a copyreg reducer (``reduce_registered``) in the tests."""

    def __init__(self, inner):
        self.inner = inner

    def __reduce_ex__(self, protocol):
        raise TypeError("Registered has no pickle support of its own")


def reduce_registered(obj):
    """A copyreg reducer for :class:`Registered`."""
    return Registered, (obj.inner,)


class Proxy(object):
    """Forwards attribute access to its target; ``__getattr__`` recurses without one."""

    def __init__(self, target, extra=None):
        self._target = target
        self.extra = extra

    def __getattr__(self, name):
        return getattr(self._target, name)


class BrokenProxy(Proxy):
    """A proxy whose ``__getstate__`` reads an attribute it never set: endless recursion."""

    def __getstate__(self):
        return {"target": self.target_not_set}


class NoPickle(object):
    """An object that refuses to pickle with a message of its own."""

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle 'NoPickle' object")


class KeyErrorOnPickle(object):
    """Raises KeyError (which has its own ``__str__``) when pickled."""

    def __reduce_ex__(self, protocol):
        raise KeyError("missing")


class OSErrorOnPickle(object):
    """Raises OSError(errno, strerror) when pickled."""

    def __reduce_ex__(self, protocol):
        raise OSError(5, "device gone")


class LazyLmdbDataset(object):
    """The lazy-open pattern of the lmdb hint, as a DataLoader dataset."""

    def __init__(self, path):
        self.path = path
        self.env = None  # opened on first use, in each worker

    def __len__(self):
        return 4

    def __getitem__(self, index):
        if self.env is None:
            import lmdb
            self.env = lmdb.open(self.path, readonly=True, lock=False, readahead=False)
        with self.env.begin() as txn:
            return int(txn.get(b"%d" % index))

    def __getstate__(self):
        state = self.__dict__.copy()
        state["env"] = None  # never pickle the open handle
        return state


def pool_initializer(value):
    """A Pool/executor initializer that pickles."""
    return value


# For ``python -m mpcompat explain diagnose_workers:...``.
BROKEN = Holder(name="broken", callbacks=[add, functools.partial(add, 1), LAMBDA],
                lock=threading.Lock())
FINE = Holder(name="fine", numbers=list(range(10)), function=add)


def _spawn_process_class():
    from multiprocessing.context import SpawnProcess
    return SpawnProcess


class LoggingProcess(_spawn_process_class()):
    """A spawn Process subclass that keeps an attribute of its own."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def run(self):
        self.log.write("ran\n")


def keys_of(mapping):
    """The keys view of ``mapping`` (a view made where this runs)."""
    return mapping.keys()


def lock_in_result():
    """A result that cannot be pickled: a lock two levels down."""
    import threading
    return {"k": [threading.Lock()]}


def raise_key_error():
    raise KeyError("gone")
