"""The README's code examples run as written (pasted into a file, with real libraries)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_block(heading):
    """The first ```python block after the README heading ``heading``."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index(heading)
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, start)
    return match.group(1)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_per_process_example_runs_in_dataloader_workers(tmp_path, start_method):
    (tmp_path / "readme_dataset.py").write_text(readme_block("### Handles kept on a Dataset"))
    script = tmp_path / "run_example.py"
    script.write_text(textwrap.dedent("""
        import sys
        import h5py, lmdb, numpy, torch
        from readme_dataset import MyDataset

        if __name__ == "__main__":
            root = sys.argv[1]
            with lmdb.open(root + "/env", map_size=1 << 20) as env, env.begin(write=True) as txn:
                for i in range(6):
                    txn.put(b"%d" % i, b"value-%d" % i)
            with h5py.File(root + "/x.h5", "w") as f:
                f["x"] = numpy.arange(6) * 10
            loader = torch.utils.data.DataLoader(
                MyDataset(root, 6), batch_size=None, num_workers=2,
                multiprocessing_context=sys.argv[2])
            print(sorted((value.decode(), int(x)) for value, x in loader))
    """))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), start_method], cwd=str(tmp_path),
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)])))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([("value-%d" % i, 10 * i) for i in range(6)])
