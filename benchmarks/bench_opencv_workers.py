"""Benchmark patch ``opencv.worker_threads``: a cv2-heavy DataLoader epoch, with vs without.

Each measurement is a fresh interpreter running a DataLoader (2 workers, ``persistent_workers``)
over 32 images of 1280x1024x3 (1.3 MP): GaussianBlur 15x15, resize up to 1920x1536 (cubic)
and down to 640x512 (area), cvtColor to grey, per image; the workers send back one small tensor per image. One warm-up epoch starts the
workers, then 3 epochs are timed (best kept). "with" runs with every patch on (OpenCV
single-threaded in the workers); "without" with ``MPCOMPAT_DISABLED_PATCHES=
opencv.worker_threads`` (OpenCV's own thread count, one thread per core, in every worker).
fork and spawn, with and without, alternate in each round. Target: not slower (ratio <= 1.05).
Run: ``python benchmarks/bench_opencv_workers.py [--quick]`` or ``benchmarks/run.py
opencv_workers``.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from _common import Table, fmt_ms, verdict  # noqa: E402

PATCH = "opencv.worker_threads"
TARGET = 1.05
EPOCHS = 3

CHILD = r'''
import json, sys, time
import mpcompat
import cv2
import numpy as np
import torch
import torch.utils.data as data


_BASE = []


def base_image():
    """A 1280x1024 colour image, made once per process (no disk)."""
    if not _BASE:
        rows = np.arange(1024, dtype=np.uint16)[:, None, None]
        cols = np.arange(1280, dtype=np.uint16)[None, :, None]
        _BASE.append(((rows * 3 + cols * 7 + np.arange(3, dtype=np.uint16)) % 251
                      ).astype(np.uint8))
    return _BASE[0]


class Images(data.Dataset):
    """32 synthetic 1280x1024 colour images, each blurred, resized and turned grey."""

    def __len__(self):
        return 32

    def __getitem__(self, index):
        image = cv2.add(base_image(), (index * 7 % 64, index % 32, 5, 0))
        image = cv2.GaussianBlur(image, (15, 15), 0)
        image = cv2.resize(image, (1920, 1536), interpolation=cv2.INTER_CUBIC)
        image = cv2.resize(image, (640, 512), interpolation=cv2.INTER_AREA)
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        return torch.from_numpy(grey[::64, ::64].copy())


if __name__ == "__main__":
    method, epochs = sys.argv[1], int(sys.argv[2])
    loader = data.DataLoader(Images(), batch_size=4, num_workers=2, persistent_workers=True,
                             multiprocessing_context=method)
    for batch in loader:  # warm-up: starts the workers
        pass
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for batch in loader:
            pass
        times.append(time.perf_counter() - start)
    print("TIMES " + json.dumps(times), flush=True)
'''


def _measure(method, on, epochs):
    """Run one child interpreter; return its best epoch time in seconds."""
    env = dict(os.environ)
    env.pop("MPCOMPAT_DISABLE", None)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    if on:
        env.pop("MPCOMPAT_DISABLED_PATCHES", None)
    else:
        env["MPCOMPAT_DISABLED_PATCHES"] = PATCH
    import tempfile
    with tempfile.TemporaryDirectory(prefix="mpcompat-bench-") as directory:
        path = os.path.join(directory, "epoch.py")  # a file: spawn workers import it
        with open(path, "w") as fh:
            fh.write(CHILD)
        proc = subprocess.run([sys.executable, path, method, str(epochs)], env=env,
                              cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=600)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("TIMES ")]
    if not lines:
        raise RuntimeError("benchmark child failed (%s, %s): %s" % (
            method, "with" if on else "without", proc.stderr.strip()[-2000:]))
    return min(json.loads(lines[-1][len("TIMES "):]))


def run(quick=False):
    """Alternate the four configurations over rounds; return a list of one Table."""
    import cv2
    rounds = 2 if quick else 4
    configs = [(method, on) for method in ("fork", "spawn") for on in (True, False)]
    best = {config: [] for config in configs}
    for round_no in range(rounds):
        shift = round_no % len(configs)
        for config in configs[shift:] + configs[:shift]:
            best[config].append(_measure(config[0], config[1], EPOCHS))
    table = Table("OpenCV in DataLoader workers: a cv2-heavy epoch with vs without the patch",
                  ["start method", "without (OpenCV threads per worker: %d)" % (
                      cv2.getNumThreads(),), "with (1 thread per worker)", "ratio",
                   "target", "result"])
    for method in ("fork", "spawn"):
        with_, without = min(best[(method, True)]), min(best[(method, False)])
        ratio = with_ / without
        table.add(method, fmt_ms(without), fmt_ms(with_), "%.3f" % ratio,
                  "<= %.2f" % TARGET, verdict(ratio <= TARGET))
    table.notes.append(
        "one epoch: 32 images of 1280x1024x3, GaussianBlur 15x15 + 2 resizes + cvtColor each, "
        "batch_size=4, 2 persistent workers; best epoch of %d per interpreter, best of %d "
        "interpreters per configuration, the four configurations alternating; OpenCV %s, "
        "%d CPUs" % (EPOCHS, rounds, cv2.__version__, os.cpu_count() or 0))
    return [table]


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    tables = run(quick="--quick" in (sys.argv[1:] if argv is None else argv))
    for table in tables:
        print(table)
    return 1 if any("FAIL" in row for t in tables for row in t.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
