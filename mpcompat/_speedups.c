/* mpcompat._speedups: the dict-view reducers in C, with a small cache of argument tuples.
 *
 * A reducer returns (rebuild, tuple(view)). The pickler memoizes that tuple, so a fresh tuple
 * per view stays alive until the pickle is done: 100,000 views mean 100,000 tuples written to
 * cold memory and freed at the end. When many views hold the very same key objects (per-sample
 * infos that all keep the same class names), the keys reducer hands out one cached tuple
 * instead: the pickler writes it once and refers to it from its memo afterwards.
 *
 * The cache matches by identity, never by equality: a cached tuple is reused only when every
 * element is the same object, in the same order, so the rebuilt views hold exactly the objects
 * the originals held. It holds at most CACHE_SLOTS tuples of at most CACHE_MAX_LEN keys, one
 * per slot, first come first kept; release_idle() (run by mpcompat after each garbage
 * collection) drops the tuples that nothing but the cache still refers to, so keys are not kept
 * alive after the pickling that used them, and their slots take new tuples.
 *
 * Values views are not cached: values may be large (arrays) and are rarely shared.
 * Python 3.8-3.13, GIL builds; the pure-Python reducers in mpcompat/rebuild.py are the
 * fallback and define the behaviour.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define CACHE_SLOTS 256 /* a power of two */
#define CACHE_MAX_LEN 32

static PyObject *cache[CACHE_SLOTS];
/* each slot's identity_hash: a miss is found without reading the (often cold) cached tuple */
static size_t cache_hashes[CACHE_SLOTS];
#define SWEEP_AFTER 1024
static Py_ssize_t blocked_stores;
static Py_ssize_t cache_hits, cache_misses;

/* A dict view is PyObject_HEAD and then the dict: the same layout in every CPython from 3.0
 * on, but no longer in the public headers from 3.13. PyInit checks it on a real view. */
typedef struct {
    PyObject_HEAD
    PyObject *dict;
} view_layout;

static int layout_checked;

static size_t
identity_hash(PyObject **items, Py_ssize_t n)
{
    Py_ssize_t i;
    size_t h = (size_t)n * (size_t)0x9E3779B97F4A7C15ULL;
    for (i = 0; i < n; i++) {
        h ^= (size_t)(uintptr_t)items[i] >> 4;
        h *= (size_t)0x100000001B3ULL;
        h ^= h >> 29;
    }
    return h;
}

/* The cached tuple holding exactly the objects items[0..n) (a new reference), or NULL. */
static PyObject *
cache_lookup(PyObject **items, Py_ssize_t n, size_t hash)
{
    size_t slot = hash & (CACHE_SLOTS - 1);
    PyObject *old = cache[slot];
    Py_ssize_t i;
    if (old == NULL || cache_hashes[slot] != hash || PyTuple_GET_SIZE(old) != n)
        return NULL;
    for (i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(old, i) != items[i])
            return NULL;
    }
    cache_hits++;
    Py_INCREF(old);
    return old;
}

/* Drop cached tuples that only the cache refers to; with `everything`, drop them all. */
static void
release(int everything)
{
    Py_ssize_t i;
    for (i = 0; i < CACHE_SLOTS; i++) {
        PyObject *t = cache[i];
        if (t != NULL && (everything || Py_REFCNT(t) == 1)) {
            cache[i] = NULL;
            Py_DECREF(t);
        }
    }
}

/* Keep `tuple` in its slot if the slot is free. An occupied slot is left alone: replacing it
 * would touch the evicted tuple, which is cold memory when every view has keys of its own, and
 * costs more than the cache saves. Idle tuples free their slots after each garbage collection
 * and, without one, after every SWEEP_AFTER stores that found their slot taken. */
static void
cache_store(PyObject *tuple, size_t hash)
{
    size_t slot = hash & (CACHE_SLOTS - 1);
    cache_misses++;
    if (cache[slot] != NULL) {
        if (++blocked_stores < SWEEP_AFTER)
            return;
        blocked_stores = 0;
        release(0); /* may run arbitrary code (a key's __del__): look at the slot again */
        if (cache[slot] != NULL)
            return;
    }
    Py_INCREF(tuple);
    cache[slot] = tuple;
    cache_hashes[slot] = hash;
}

/* Exact dict_keys: collect the keys with PyDict_Next, which runs no Python code (so the
 * borrowed pointers stay valid), and build a tuple only when the cache has none. */
static PyObject *
dict_keys_tuple(PyObject *view)
{
    PyObject *dict = ((view_layout *)view)->dict;
    PyObject *items[CACHE_MAX_LEN], *key, *value, *tuple;
    Py_ssize_t n = PyDict_Size(dict), pos = 0, i = 0;
    size_t hash;

    if (n == 0 || n > CACHE_MAX_LEN)
        return PySequence_Tuple(view);
    while (i < n && PyDict_Next(dict, &pos, &key, &value))
        items[i++] = key;
    n = i; /* never fewer than PyDict_Size said; this keeps the tuple below whole regardless */
    hash = identity_hash(items, n);
    tuple = cache_lookup(items, n, hash);
    if (tuple != NULL)
        return tuple;
    tuple = PyTuple_New(n);
    if (tuple == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(tuple, i, items[i]);
    }
    cache_store(tuple, hash);
    return tuple;
}

/* Any other view (odict_keys: its order is the OrderedDict's own): iterate, then look up. */
static PyObject *
iterated_keys_tuple(PyObject *view)
{
    PyObject *tuple = PySequence_Tuple(view), *cached;
    Py_ssize_t n;
    size_t hash;

    if (tuple == NULL)
        return NULL;
    n = PyTuple_GET_SIZE(tuple);
    if (n == 0 || n > CACHE_MAX_LEN)
        return tuple;
    hash = identity_hash(&PyTuple_GET_ITEM(tuple, 0), n);
    cached = cache_lookup(&PyTuple_GET_ITEM(tuple, 0), n, hash);
    if (cached != NULL) {
        Py_DECREF(tuple);
        return cached;
    }
    cache_store(tuple, hash);
    return tuple;
}

/* The rebuild functions of mpcompat.rebuild, set once by bind(). */
enum { DICT_KEYS, DICT_VALUES, ODICT_KEYS, ODICT_VALUES, N_KINDS };
static const char *kind_names[N_KINDS] = {"dict_keys", "dict_values", "odict_keys",
                                          "odict_values"};
static PyObject *rebuilds[N_KINDS];

static PyObject *
reduce_view(int kind, PyObject *view)
{
    PyObject *items, *result;

    if (rebuilds[kind] == NULL) {
        PyErr_Format(PyExc_RuntimeError,
                     "mpcompat._speedups.reduce_%s: no rebuild function bound (bind())",
                     kind_names[kind]);
        return NULL;
    }
    if (kind == DICT_VALUES || kind == ODICT_VALUES)
        items = PySequence_Tuple(view);
    else if (Py_TYPE(view) == &PyDictKeys_Type && layout_checked)
        items = dict_keys_tuple(view);
    else
        items = iterated_keys_tuple(view);
    if (items == NULL)
        return NULL;
    result = PyTuple_Pack(2, rebuilds[kind], items);
    Py_DECREF(items);
    return result;
}

static PyObject *
reduce_dict_keys(PyObject *module, PyObject *view)
{
    return reduce_view(DICT_KEYS, view);
}

static PyObject *
reduce_dict_values(PyObject *module, PyObject *view)
{
    return reduce_view(DICT_VALUES, view);
}

static PyObject *
reduce_odict_keys(PyObject *module, PyObject *view)
{
    return reduce_view(ODICT_KEYS, view);
}

static PyObject *
reduce_odict_values(PyObject *module, PyObject *view)
{
    return reduce_view(ODICT_VALUES, view);
}

static PyObject *
bind(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"dict_keys", "dict_values", "odict_keys", "odict_values", NULL};
    PyObject *given[N_KINDS];
    int i;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:bind", kwlist, &given[0], &given[1],
                                     &given[2], &given[3]))
        return NULL;
    for (i = 0; i < N_KINDS; i++) {
        if (!PyCallable_Check(given[i])) {
            PyErr_Format(PyExc_TypeError, "bind(): %s must be callable, not %.200s",
                         kind_names[i], Py_TYPE(given[i])->tp_name);
            return NULL;
        }
    }
    for (i = 0; i < N_KINDS; i++) {
        PyObject *old = rebuilds[i];
        Py_INCREF(given[i]);
        rebuilds[i] = given[i];
        Py_XDECREF(old);
    }
    Py_RETURN_NONE;
}

static PyObject *
release_idle(PyObject *module, PyObject *args)
{
    /* as a gc.callbacks entry it is called with ("start", info) and ("stop", info): only the
     * end of a collection can have freed what kept a cached tuple busy */
    PyObject *phase = PyTuple_GET_SIZE(args) > 0 ? PyTuple_GET_ITEM(args, 0) : NULL;
    if (phase != NULL && PyUnicode_Check(phase)
            && PyUnicode_CompareWithASCIIString(phase, "start") == 0)
        Py_RETURN_NONE;
    release(0);
    Py_RETURN_NONE;
}

static PyObject *
clear_cache(PyObject *module, PyObject *unused)
{
    release(1);
    cache_hits = cache_misses = blocked_stores = 0;
    Py_RETURN_NONE;
}

static PyObject *
cache_info(PyObject *module, PyObject *unused)
{
    Py_ssize_t i, used = 0;
    for (i = 0; i < CACHE_SLOTS; i++)
        used += cache[i] != NULL;
    return Py_BuildValue("{s:n,s:n,s:n,s:i,s:i}", "hits", cache_hits, "misses", cache_misses,
                         "size", used, "slots", CACHE_SLOTS, "max_len", CACHE_MAX_LEN);
}

static PyMethodDef module_methods[] = {
    {"reduce_dict_keys", (PyCFunction)reduce_dict_keys, METH_O,
     "reduce_dict_keys(view)\n--\n\nReduce a dict_keys view to (rebuild, its keys); cached."},
    {"reduce_dict_values", (PyCFunction)reduce_dict_values, METH_O,
     "reduce_dict_values(view)\n--\n\nReduce a dict_values view to (rebuild, its values)."},
    {"reduce_odict_keys", (PyCFunction)reduce_odict_keys, METH_O,
     "reduce_odict_keys(view)\n--\n\nReduce an odict_keys view to (rebuild, its keys); cached."},
    {"reduce_odict_values", (PyCFunction)reduce_odict_values, METH_O,
     "reduce_odict_values(view)\n--\n\n"
     "Reduce an odict_values view to (rebuild, its values)."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_VARARGS | METH_KEYWORDS,
     "bind(dict_keys, dict_values, odict_keys, odict_values)\n--\n\n"
     "Set the rebuild function each reducer names in its pickles."},
    {"release_idle", (PyCFunction)release_idle, METH_VARARGS,
     "release_idle(*args)\n--\n\n"
     "Drop the cached tuples nothing else refers to; as a gc.callbacks entry, at 'stop' only."},
    {"clear_cache", (PyCFunction)clear_cache, METH_NOARGS,
     "clear_cache()\n--\n\nDrop every cached tuple and reset the counters."},
    {"cache_info", (PyCFunction)cache_info, METH_NOARGS,
     "cache_info()\n--\n\nReturn {'hits', 'misses', 'size', 'slots', 'max_len'}."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "mpcompat._speedups",
    "C versions of mpcompat's dict-view reducers (see mpcompat/rebuild.py).", -1,
    module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *dict = PyDict_New(), *view;
    if (dict == NULL)
        return NULL;
    view = PyObject_CallMethod(dict, "keys", NULL);
    if (view == NULL) {
        Py_DECREF(dict);
        return NULL;
    }
    layout_checked = Py_TYPE(view) == &PyDictKeys_Type && ((view_layout *)view)->dict == dict;
    Py_DECREF(view);
    Py_DECREF(dict);
    return PyModule_Create(&module_def);
}
