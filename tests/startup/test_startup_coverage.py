"""coverage.py measures multiprocessing children where mpcompat is installed as where it is not.

coverage's ``concurrency = multiprocessing`` replaces ``BaseProcess._bootstrap`` with a wrapper
that starts measuring in each child, made around what is there as coverage starts: with the
installed wheel, mpcompat's first-use stub (mpcompat activated as coverage imported
multiprocessing). The patches go on beneath that wrapper at the first use, so that it runs once
in each child; it ran twice in each fork child before (coverage then warned "No data was
collected" and saved an extra, empty data file per child).
"""
import json
import os

SCRIPT = """import multiprocessing, sys
def square(x):
    return x * x
def child(x):
    return x + 1
if __name__ == "__main__":
    for method in ("fork", "forkserver", "spawn"):
        context = multiprocessing.get_context(method)
        pool = context.Pool(1)  # (an idle worker would say "No data was collected")
        assert pool.map(square, range(4)) == [0, 1, 4, 9]
        pool.close()  # (terminate() would kill the workers before coverage saves their data)
        pool.join()
        process = context.Process(target=child, args=(1,))
        process.start()
        process.join()
    print("mpcompat" in sys.modules)
"""
CONFIG = "[run]\nconcurrency = multiprocessing\nparallel = true\nsource = .\n"


def _measured(venv, directory, **env):
    """Run SCRIPT under ``coverage run`` in ``directory``; return whether mpcompat was active,
    what it wrote on stderr (coverage's warnings), its number of data files (one per process
    measured) and the lines of the script executed."""
    os.makedirs(directory)
    for name, text in (("script.py", SCRIPT), (".coveragerc", CONFIG)):
        with open(os.path.join(directory, name), "w") as f:
            f.write(text)
    run = venv.run(["python", "-m", "coverage", "run", "script.py"], cwd=directory, **env)
    assert run.returncode == 0, run.stdout + run.stderr
    files = [name for name in os.listdir(directory) if name.startswith(".coverage.")]
    for argv in (["combine", "-q"], ["json", "-q", "-o", "lines.json"]):
        proc = venv.run(["python", "-m", "coverage"] + argv, cwd=directory)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(os.path.join(directory, "lines.json")) as f:
        lines = json.load(f)["files"]["script.py"]["executed_lines"]
    return run.stdout.strip(), run.stderr, len(files), lines


def test_coverage_measures_every_child_once_as_without_mpcompat(installed, tmp_path):
    with_mpcompat = _measured(installed, str(tmp_path / "with"))
    without = _measured(installed, str(tmp_path / "without"), MPCOMPAT_DISABLE="1")
    assert (with_mpcompat[0], without[0]) == ("True", "False")
    assert with_mpcompat[1:] == without[1:] and not without[1], (with_mpcompat, without)
    assert {3, 5} <= set(without[3])  # the children's lines: measured there
