"""The README's code examples run as written (pasted into a file, with real libraries)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_text():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def readme_section(heading):
    """The text of the README section ``heading`` (a whole heading line), up to the next
    heading of the same or a higher level."""
    text = readme_text()
    start = text.index("\n%s\n" % heading) + 1
    level = heading.split(" ")[0]
    end = re.compile(r"^#{1,%d} " % len(level), re.M).search(text, start + len(heading))
    return text[start:end.start() if end else len(text)]


def code_blocks(text):
    """The fenced code blocks of ``text``, in order; fails on a fence that does not close."""
    blocks, block = [], None
    for number, line in enumerate(text.splitlines(), 1):
        if block is None and line.startswith("```"):
            assert re.match(r"^```\w*$", line), "line %d: bad opening fence %r" % (number, line)
            block = []
        elif block is not None and line.lstrip().startswith("```"):
            # Anything after a closing fence makes it no fence: the block would run on.
            assert line == "```", "line %d: bad closing fence %r" % (number, line)
            blocks.append("\n".join(block))
            block = None
        elif block is not None:
            block.append(line)
    assert block is None, "a code block is not closed"
    return blocks


def test_every_code_block_of_the_readme_closes():
    assert len(code_blocks(readme_text())) >= 10


def test_install_says_pip_install_torch_is_the_cuda_build_and_shows_the_cpu_one():
    section = readme_section("## Install")
    assert "A bare `pip install torch` on Linux pulls the CUDA build" in section
    commands = [line for block in code_blocks(section) for line in block.splitlines()]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in commands


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
            dataset = MyDataset(root, 6)
            assert len(dataset) == 6
            loader = torch.utils.data.DataLoader(
                dataset, batch_size=None, num_workers=2,
                multiprocessing_context=sys.argv[2])
            print(sorted((value.decode(), int(x)) for value, x in loader))
    """))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path), start_method], cwd=str(tmp_path),
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)])))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([("value-%d" % i, 10 * i) for i in range(6)])
