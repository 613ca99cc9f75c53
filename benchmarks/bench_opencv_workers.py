"""Benchmark patch ``opencv.worker_threads``: a cv2-heavy DataLoader epoch, with vs without.

Two interpreters stay up side by side, one with every patch on (OpenCV single-threaded in the
workers), one with ``MPCOMPAT_DISABLED_PATCHES=opencv.worker_threads`` (OpenCV's own thread
count, one thread per core, in every worker). Each holds a DataLoader (2 persistent workers)
over 128 images of 1280x1024x3 (1.3 MP): GaussianBlur 15x15, resize up to 1920x1536 (cubic)
and down to 640x512 (area), cvtColor to grey, per image; the workers send back one small
tensor per image. After a warm-up epoch each (which starts the workers), the driver asks them
for one epoch at a time, alternating, so that a noisy machine slows both alike; the best epoch
of each is compared. fork, then spawn. Target: not slower (ratio <= 1.05).
Run: ``python benchmarks/bench_opencv_workers.py [--quick]`` or ``benchmarks/run.py
opencv_workers``.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from _common import print_tables, Table, fmt_ms, verdict  # noqa: E402

PATCH = "opencv.worker_threads"
TARGET = 1.05

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
    """128 synthetic 1280x1024 colour images, each blurred, resized and turned grey."""

    def __len__(self):
        return 128

    def __getitem__(self, index):
        image = cv2.add(base_image(), (index * 7 % 64, index % 32, 5, 0))
        image = cv2.GaussianBlur(image, (15, 15), 0)
        image = cv2.resize(image, (1920, 1536), interpolation=cv2.INTER_CUBIC)
        image = cv2.resize(image, (640, 512), interpolation=cv2.INTER_AREA)
        grey = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
        return torch.from_numpy(grey[::64, ::64].copy())


if __name__ == "__main__":
    loader = data.DataLoader(Images(), batch_size=4, num_workers=2, persistent_workers=True,
                             multiprocessing_context=sys.argv[1])
    for line in sys.stdin:  # one epoch per line; the first one is the warm-up
        start = time.perf_counter()
        for batch in loader:
            pass
        print("EPOCH %r" % (time.perf_counter() - start), flush=True)
'''


class _Child(object):
    """An interpreter holding a DataLoader; :meth:`epoch` runs one epoch in it."""

    def __init__(self, path, method, on):
        env = dict(os.environ)
        env.pop("MPCOMPAT_DISABLE", None)
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        if on:
            env.pop("MPCOMPAT_DISABLED_PATCHES", None)
        else:
            env["MPCOMPAT_DISABLED_PATCHES"] = PATCH
        self.label = "%s, %s" % (method, "with" if on else "without")
        self.proc = subprocess.Popen([sys.executable, path, method], env=env,
                                     cwd=os.path.dirname(path), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, universal_newlines=True)

    def epoch(self):
        """Run one epoch; return its time in seconds."""
        self.proc.stdin.write("epoch\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("EPOCH "):
            raise RuntimeError("benchmark child (%s) failed: %r" % (self.label, line))
        return float(line[len("EPOCH "):])

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _compare(path, method, epochs):
    """Alternate epochs of the two interpreters; return ``{on: [seconds, ...]}``."""
    children = {on: _Child(path, method, on) for on in (True, False)}
    try:
        for child in children.values():
            child.epoch()  # warm-up: starts the workers
        times = {True: [], False: []}
        for round_no in range(epochs):
            order = (True, False) if round_no % 2 == 0 else (False, True)
            for on in order:
                times[on].append(children[on].epoch())
        return times
    finally:
        for child in children.values():
            child.close()


def run(quick=False):
    """Compare with and without the patch under fork and spawn; return a list of one Table."""
    import tempfile

    import cv2
    epochs = 5 if quick else 12
    table = Table("OpenCV in DataLoader workers: a cv2-heavy epoch with vs without the patch",
                  ["start method", "without (OpenCV threads per worker: %d)" % (
                      cv2.getNumThreads(),), "with (1 thread per worker)", "ratio",
                   "target", "result"])
    with tempfile.TemporaryDirectory(prefix="mpcompat-bench-") as directory:
        path = os.path.join(directory, "epoch.py")  # a file: spawn workers import it
        with open(path, "w") as fh:
            fh.write(CHILD)
        for method in ("fork", "spawn"):
            times = _compare(path, method, epochs)
            with_, without = min(times[True]), min(times[False])
            ratio = with_ / without
            table.add(method, fmt_ms(without), fmt_ms(with_), "%.3f" % ratio,
                      "<= %.2f" % TARGET, verdict(ratio <= TARGET))
    table.notes.append(
        "one epoch: 128 images of 1280x1024x3, GaussianBlur 15x15 + 2 resizes + cvtColor each, "
        "batch_size=4, 2 persistent workers; best of %d epochs each, with and without "
        "alternating between two interpreters that stay up; OpenCV %s, %d CPUs"
        % (epochs, cv2.__version__, os.cpu_count() or 0))
    return [table]


def main(argv=None):
    """Print the table; return 0 when every target is met."""
    return print_tables(run(quick="--quick" in (sys.argv[1:] if argv is None else argv)))


if __name__ == "__main__":
    sys.exit(main())
