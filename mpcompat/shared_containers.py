"""``shared_list`` and ``shared_dict``: read-only containers whose items live pickled in one
buffer shared with worker processes (issue 37).

A DataLoader dataset that keeps a list of dicts (mmdet's ``self.data_infos``) grows in every
worker: under fork, reading an item writes its reference counts, and copy-on-write copies the
pages; under spawn and forkserver, every worker unpickles its own copy of the whole list. Here
each item is pickled once, into one buffer: a header, an offsets array and the pickles side by
side (a dict adds the keys' stable hashes and an open-addressing table). Reading an item
unpickles a fresh copy from the buffer; nothing in the buffer is ever written again.

Where the buffer lives:

- torch already imported (``"torch" in sys.modules``; torch is never imported for this): a
  ``uint8`` tensor moved to shared memory with torch's sharing strategy as the container is
  made. Pickled by ``multiprocessing`` (spawn/forkserver start, Pool and Queue messages), the
  tensor goes through torch's own reducers: a file descriptor (``file_descriptor``) or a name
  that torch's shm manager cleans up (``file_system``). A strategy switched afterwards gets a
  second shared copy rather than moving the first (torch would free the memory read here).
- otherwise ``multiprocessing.shared_memory``, created by the owner and unlinked when the
  owner's container is collected or its process ends (``weakref.finalize``; a killed owner's
  segment is removed by multiprocessing's resource tracker, with its own warning). Other
  processes attach by name, read-only, without registering the segment with a resource tracker
  (a child's tracker would unlink the owner's segment as the child ends, bpo-39959).

Under fork nothing is pickled: the workers read the mapping the parent made. Pickled any other
way (``pickle.dumps``, ``copy``), a container carries its bytes and is rebuilt as a new owner.
The rebuild functions below are named by pickles; they unpickle items, so a restricted
unpickler must never allowlist them.
"""
import os
import pickle
import sys
import weakref
from array import array
from collections.abc import ItemsView, Mapping, Sequence, ValuesView
from io import BytesIO
from operator import index as as_index
from zlib import crc32

__all__ = ["shared_list", "shared_dict", "SharedList", "SharedDict", "rebuild_from_bytes",
           "rebuild_from_tensor", "rebuild_from_shared_memory"]

PROTOCOL = pickle.HIGHEST_PROTOCOL
BACKENDS = ("torch", "shared_memory")
_WORD = 8  # the header, offsets, hashes and table are native int64 ("q")
_HASH_MASK = (1 << 63) - 1
_loads = pickle.loads


def shared_list(seq=(), backend=None):
    """A read-only list of ``seq``'s items, kept pickled in one buffer shared with worker
    processes instead of as Python objects (see the module docstring).

    It reads like a list: ``len``, ``sl[i]`` (negative too), iteration, ``in``, ``index``,
    ``count``, ``== list``, ``+``. ``sl[i]`` unpickles a fresh copy of item ``i`` at each
    access: mutating what it returns does not change the container. A slice (``sl[1:3]``) and
    ``copy()`` return a plain ``list`` of such copies. Writing (``sl[i] = x``, ``append``,
    ``del``, ``sort``, ...) raises ``TypeError``. Pickled for a spawn/forkserver child it
    sends a handle to the buffer, not the items.

    ``backend``: ``"torch"`` (a shared uint8 tensor), ``"shared_memory"``
    (``multiprocessing.shared_memory``) or None: torch where it is imported already, else
    shared_memory. Items must pickle; each access costs one ``pickle.loads``.
    """
    if type(seq) is SharedList and backend in (None, seq.backend):
        return seq
    items = list(seq)
    return SharedList(_pack(items, 0, ()), _store_for(backend))


def shared_dict(mapping=(), backend=None):
    """A read-only dict of ``mapping``'s items (a mapping, or what ``dict()`` accepts), kept
    pickled in one buffer shared with worker processes, in ``mapping``'s order.

    It reads like a dict: ``d[key]``, ``get``, ``in``, ``len``, iteration, ``keys()``,
    ``values()``, ``items()``, ``== dict``. Each access unpickles a fresh copy of the value:
    mutating it does not change the container; ``copy()`` returns a plain dict. Writing
    raises ``TypeError``. Keys must be str, bytes, numbers, None, or tuples and frozensets of
    those: their hashes must be the same in every process (str's built-in hash is not).
    ``backend`` as for :func:`shared_list`.
    """
    if type(mapping) is SharedDict and backend in (None, mapping.backend):
        return mapping
    if not isinstance(mapping, Mapping):
        mapping = dict(mapping)
    keys = list(mapping)
    hashes = []
    for key in keys:
        digest = stable_hash(key)
        if digest is None:
            raise TypeError("shared_dict keys must be str, bytes, numbers, None, or tuples "
                            "and frozensets of them (their hashes must be the same in every "
                            "process): key %.80r is a %s" % (key, type(key).__name__))
        hashes.append(digest)
    records = keys + [mapping[key] for key in keys]
    return SharedDict(_pack(records, len(keys), hashes), _store_for(backend))


def stable_hash(key):
    """A hash of ``key`` that every process computes alike (equal keys, equal hashes), or None
    for a type it does not cover; ``TypeError`` for an unhashable key."""
    if isinstance(key, str):
        return crc32(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, bytes):
        return crc32(key) | 1 << 32
    if isinstance(key, (int, float, complex)):  # bool is an int; IntEnum: its int's hash
        if key != key:  # NaN: its built-in hash is its address since 3.10
            return 0
        for base in (int, float, complex):
            if isinstance(key, base):
                return base.__hash__(key) & _HASH_MASK
    if key is None:
        return 0x5EED
    if isinstance(key, (tuple, frozenset)):
        parts = [stable_hash(part) for part in key]
        if None in parts:
            return None
        if isinstance(key, frozenset):
            return (sum(parts) * 0x9E3779B1 + len(parts)) & _HASH_MASK
        digest = 0x345678
        for part in parts:
            digest = ((digest ^ part) * 1000003) & _HASH_MASK
        return digest
    hash(key)  # raises TypeError for an unhashable key, as a dict does
    return None


# Packing: the header, offsets, hashes, table and the pickles, in one buffer

def _pack(records, n_keys, hashes):
    """``(size, write)`` for the buffer of ``records`` (a dict's keys, then its values):
    ``write(view)`` fills a writable byte memoryview of ``size`` bytes."""
    out = BytesIO()
    offsets = array("q", [0])
    dumps, write, tell = pickle.dumps, out.write, out.tell
    for record in records:
        write(dumps(record, PROTOCOL))
        offsets.append(tell())
    table = array("q")
    if n_keys:
        slots = 8
        while slots < 2 * n_keys:  # load factor at most 1/2: short probes
            slots *= 2
        table = array("q", bytes(_WORD * slots))
        mask = slots - 1
        for number, digest in enumerate(hashes):
            slot = digest & mask
            while table[slot]:
                slot = (slot + 1) & mask
            table[slot] = number + 1
    parts = [array("q", [len(records), n_keys, len(table)]), offsets, array("q", hashes), table]
    size = sum(len(part) for part in parts) * _WORD + tell()

    def write_into(view):
        position = 0
        for part in parts + [out.getbuffer()]:
            data = memoryview(part).cast("B")
            view[position:position + len(data)] = data
            position += len(data)
            data.release()
    return size, write_into


def _store_for(backend):
    """The store class for ``backend`` (None: torch where it is imported already)."""
    if backend is None:
        torch = sys.modules.get("torch")
        backend = "torch" if getattr(torch, "uint8", None) is not None else "shared_memory"
    if backend == "torch":
        return _TorchStore
    if backend == "shared_memory":
        return _MemoryStore
    raise ValueError("backend must be one of %s or None, not %r" % (BACKENDS, backend))


def _address_view(address, size):
    """A writable byte memoryview of ``size`` bytes at ``address`` (ctypes: no copy)."""
    import ctypes
    return memoryview((ctypes.c_ubyte * size).from_address(address)).cast("B")


class _TorchStore(object):
    """The buffer in a uint8 tensor in torch's shared memory (the tensor is never moved:
    the view reads its address)."""

    backend = "torch"
    __slots__ = ("tensor", "strategy", "view", "copies")

    def __init__(self, tensor, strategy):
        """``tensor``: shared already, with torch's sharing ``strategy``."""
        self.tensor, self.strategy, self.copies = tensor, strategy, {}
        self.view = _address_view(tensor.data_ptr(), tensor.numel()).toreadonly()

    @classmethod
    def create(cls, packed):
        import torch
        import torch.multiprocessing as torch_mp
        size, write = packed
        tensor = torch.empty(size, dtype=torch.uint8)
        tensor.share_memory_()  # first, so that the bytes are written once, where they stay
        write(_address_view(tensor.data_ptr(), size))
        return cls(tensor, torch_mp.get_sharing_strategy())

    def reduce(self, kind):
        import torch.multiprocessing as torch_mp
        strategy = torch_mp.get_sharing_strategy()
        tensor = self.tensor
        if strategy != self.strategy:  # torch would move ours to the other kind of memory
            tensor = self.copies.get(strategy)
            if tensor is None:
                tensor = self.copies[strategy] = self.tensor.clone().share_memory_()
        return rebuild_from_tensor, (kind, tensor, strategy)

    def describe(self):
        return "torch shared memory (%s)" % self.strategy


class _MemoryStore(object):
    """The buffer in a ``multiprocessing.shared_memory`` segment: made and unlinked by its
    owner, attached read-only by name elsewhere."""

    backend = "shared_memory"
    __slots__ = ("name", "size", "owner", "view", "keep", "__weakref__")

    @classmethod
    def create(cls, packed):
        from multiprocessing import shared_memory
        size, write = packed
        # Made by SharedMemory: registered with the resource tracker, which unlinks it if this
        # process is killed. Written through a mapping of our own, which stays: its pages are
        # then mapped here and in each reader, shared (a page mapped by one process only is
        # that process's "Private" memory in /proc/PID/smaps).
        segment = shared_memory.SharedMemory(create=True, size=size)
        segment.close()
        store = cls.__new__(cls)
        store.name, store.size, store.owner = segment.name, size, os.getpid()
        weakref.finalize(store, _unlink, segment, store.owner)
        store.keep = _map(store.name, size, writable=True)
        view = memoryview(store.keep)
        write(view)
        store.view = view.toreadonly()
        view.release()
        return store

    @classmethod
    def attach(cls, name, size, owner):
        store = cls.__new__(cls)
        store.name, store.size, store.owner = name, size, owner
        try:
            store.keep = _map(name, size)
        except FileNotFoundError:
            raise FileNotFoundError(
                "the shared memory segment %r of a shared_list/shared_dict is gone: its owner "
                "(pid %d) dropped the container or ended before this process (pid %d) "
                "attached; keep it alive in the owner while workers start" % (
                    name, owner, os.getpid()))
        store.view = memoryview(store.keep)
        return store

    def reduce(self, kind):
        return rebuild_from_shared_memory, (kind, self.name, self.size, self.owner)

    def describe(self):
        return "shared memory %s" % self.name


def _map(name, size, writable=False):
    """``name``'s segment mapped (read-only unless ``writable``), unknown to every resource
    tracker."""
    try:
        import _posixshmem
    except ImportError:  # Windows: no resource tracker there
        from multiprocessing import shared_memory
        return shared_memory.SharedMemory(name=name).buf
    import mmap
    fd = _posixshmem.shm_open("/" + name, os.O_RDWR if writable else os.O_RDONLY, mode=0o600)
    try:
        return mmap.mmap(fd, size, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _unlink(segment, owner):
    """Unlink the owner's segment (never from a forked child): its name goes, the memory
    stays mapped where it is mapped."""
    if os.getpid() == owner:
        try:
            segment.unlink()
        except FileNotFoundError:
            pass


# The containers

def _refuse(operation):
    def refused(self, *args, **kwargs):
        raise TypeError(self._refusal(operation))
    refused.__name__ = refused.__qualname__ = operation
    refused.__doc__ = "Raise TypeError: the container is read-only."
    return refused


class _Shared(object):
    """What both containers share: the store, the parsed header, reading a record."""

    __slots__ = ("_store", "_offsets", "_data", "_n", "_hashes", "_table")
    _kind = ""

    def __init__(self, packed, store_class):
        self._open(store_class.create(packed))

    def _open(self, store):
        view = store.view
        records, n_keys, slots = view[:3 * _WORD].cast("q")
        position = 3 * _WORD
        fields = []
        for count in (records + 1, n_keys, slots):
            fields.append(view[position:position + count * _WORD].cast("q"))
            position += count * _WORD
        self._store, self._data = store, view[position:]
        self._offsets, self._hashes, self._table = fields
        self._n = n_keys if self._kind == "dict" else records
        return self

    @classmethod
    def _from_store(cls, store):
        return cls.__new__(cls)._open(store)

    @property
    def backend(self):
        """Where the buffer lives: ``"torch"`` or ``"shared_memory"``."""
        return self._store.backend

    @property
    def nbytes(self):
        """The size of the buffer in bytes (header, offsets and pickles)."""
        return len(self._store.view)

    def _record(self, number):
        offsets = self._offsets
        return _loads(self._data[offsets[number]:offsets[number + 1]])

    def __len__(self):
        return self._n

    def _refusal(self, operation):
        return ("%s of %s items is read-only: %s cannot change it. Its items live pickled in "
                "memory shared with worker processes, and each read returns a fresh copy; "
                "make a %s(...) copy to modify (mpcompat.%s(...) of that copy shares it "
                "again)" % (self._kind_name(), format(self._n, ","), operation,
                            self._kind, self._kind_name()))

    def _kind_name(self):
        return "shared_" + self._kind

    def __reduce__(self):  # pickle.dumps, copy: the bytes themselves
        return rebuild_from_bytes, (self._kind, self._store.view.tobytes())

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def _repr(self, shown):
        text = ", ".join(item if len(item) <= 60 else item[:57] + "..." for item in shown)
        return "<%s of %s items, %s pickled in %s: %s%s%s%s>" % (
            self._kind_name(), format(self._n, ","), _size(self.nbytes),
            self._store.describe(), "[{"[self._kind == "dict"], text,
            ", ..." if self._n > len(shown) else "", "]}"[self._kind == "dict"])


def _size(nbytes):
    for unit in ("bytes", "kB", "MB"):
        if nbytes < 1000 or unit == "MB":
            return ("%d %s" if unit == "bytes" else "%.1f %s") % (nbytes, unit)
        nbytes /= 1000.0


class SharedList(_Shared, Sequence):
    """A read-only list kept pickled in shared memory: made by :func:`shared_list`."""

    __slots__ = ()
    _kind = "list"
    __hash__ = None

    def __getitem__(self, index):
        n = self._n
        if type(index) is not int:
            if isinstance(index, slice):
                return [self._record(i) for i in range(*index.indices(n))]
            try:
                index = as_index(index)
            except TypeError:
                raise TypeError("shared_list indices must be integers or slices, not %s"
                                % type(index).__name__)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("shared_list index out of range")
        offsets = self._offsets
        return _loads(self._data[offsets[index]:offsets[index + 1]])

    def __iter__(self):
        offsets, data = self._offsets, self._data
        for number in range(self._n):
            yield _loads(data[offsets[number]:offsets[number + 1]])

    def __eq__(self, other):
        if not isinstance(other, (list, SharedList)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __add__(self, other):
        if not isinstance(other, (list, SharedList)):
            return NotImplemented
        return list(self) + list(other)

    def __radd__(self, other):
        if not isinstance(other, list):
            return NotImplemented
        return other + list(self)

    def copy(self):
        """A plain list of fresh copies of the items."""
        return list(self)

    def __repr__(self):
        return self._repr([repr(self._record(i)) for i in range(min(self._n, 3))])


class _ValuesView(ValuesView):
    __slots__ = ()

    def __iter__(self):
        shared = self._mapping
        return (shared._record(shared._n + i) for i in range(shared._n))


class _ItemsView(ItemsView):
    __slots__ = ()

    def __iter__(self):
        shared = self._mapping
        n = shared._n
        return ((shared._record(i), shared._record(n + i)) for i in range(n))


class SharedDict(_Shared, Mapping):
    """A read-only dict kept pickled in shared memory: made by :func:`shared_dict`."""

    __slots__ = ()
    _kind = "dict"
    __hash__ = None

    def _find(self, key):
        """The number of ``key`` among the keys, or -1."""
        digest = stable_hash(key)
        table = self._table
        if digest is None or not len(table):
            return -1
        mask, hashes = len(table) - 1, self._hashes
        slot = digest & mask
        while True:
            number = table[slot] - 1
            if number < 0:
                return -1
            if hashes[number] == digest and self._record(number) == key:
                return number
            slot = (slot + 1) & mask

    def __getitem__(self, key):
        number = self._find(key)
        if number < 0:
            raise KeyError(key)
        return self._record(self._n + number)

    def get(self, key, default=None):
        """The value for ``key`` (a fresh copy), else ``default``."""
        number = self._find(key)
        return default if number < 0 else self._record(self._n + number)

    def __contains__(self, key):
        return self._find(key) >= 0

    def __iter__(self):
        return (self._record(i) for i in range(self._n))

    def values(self):
        """A view of the values (fresh copies as it iterates)."""
        return _ValuesView(self)

    def items(self):
        """A view of the ``(key, value)`` pairs (fresh copies as it iterates)."""
        return _ItemsView(self)

    def copy(self):
        """A plain dict of fresh copies of the items."""
        return dict(self.items())

    def __eq__(self, other):
        if not isinstance(other, Mapping):
            return NotImplemented
        return len(self) == len(other) and dict(self.items()) == dict(other.items())

    def __repr__(self):
        n = self._n
        return self._repr(["%r: %r" % (self._record(i), self._record(n + i))
                           for i in range(min(n, 3))])


for _cls, _names in ((SharedList, "__setitem__ __delitem__ __iadd__ __imul__ append extend "
                                 "insert pop remove clear sort reverse"),
                     (SharedDict, "__setitem__ __delitem__ __ior__ pop popitem clear update "
                                 "setdefault")):
    for _name in _names.split():
        setattr(_cls, _name, _refuse(_name + "()"))
del _cls, _names, _name
_KINDS = {"list": SharedList, "dict": SharedDict}


# Rebuild functions: pickles name them (stable import paths)

def rebuild_from_bytes(kind, payload):
    """A new owner of ``payload`` (a container's bytes, from ``pickle.dumps``/``copy``)."""
    store = _store_for(None).create((len(payload), lambda view: view.__setitem__(
        slice(0, len(payload)), payload)))
    return _KINDS[kind]._from_store(store)


def rebuild_from_tensor(kind, tensor, strategy):
    """A container over ``tensor``, the owner's shared uint8 tensor, which torch's reducers
    sent by handle with sharing ``strategy`` (sent again with another one, it is copied)."""
    return _KINDS[kind]._from_store(_TorchStore(tensor, strategy))


def rebuild_from_shared_memory(kind, name, size, owner):
    """A container over the shared memory segment ``name`` made by process ``owner``,
    attached read-only."""
    return _KINDS[kind]._from_store(_MemoryStore.attach(name, size, owner))


def _reduce_for_process(shared):
    """multiprocessing's reducer (spawn/forkserver starts, Pool and Queue messages): a handle
    to the buffer."""
    return shared._store.reduce(shared._kind)


def _register():
    from multiprocessing.reduction import ForkingPickler
    for cls in (SharedList, SharedDict):
        ForkingPickler.register(cls, _reduce_for_process)


_register()
