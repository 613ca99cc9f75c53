"""The command line: a closed pipe ends it quietly, --help shows examples, the demo lists and
selects its scenarios by number, and a typo in MPCOMPAT_DISABLED_PATCHES is said once per
process tree, with the closest known name."""
import subprocess
import sys

from testenv import REPO, child_env


def _mpcompat(*args, **env):
    return subprocess.run([sys.executable, "-m", "mpcompat"] + list(args), env=child_env(**env),
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)


def test_a_closed_pipe_ends_every_subcommand_quietly():
    for argv in (["status"], ["demo", "--list"], ["--help"], ["explain", "json:dumps"]):
        proc = subprocess.Popen([sys.executable, "-m", "mpcompat"] + argv, env=child_env(),
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader is gone before anything is written (| head -0)
        stderr = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert stderr == "", (argv, stderr)
        assert proc.returncode in (0, 141), (argv, proc.returncode)
    for _ in range(5):  # a race between head exiting and status writing: try it a few times
        proc = subprocess.run("'%s' -m mpcompat status | head -1" % sys.executable, shell=True,
                              env=child_env(), cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
        assert proc.stderr == "" and proc.stdout.startswith("mpcompat "), proc.stderr


def test_help_lists_examples():
    top = _mpcompat("--help")
    assert top.returncode == 0 and "examples:\n  mpcompat status\n" in top.stdout
    for command, example in (("demo", "mpcompat demo --list"), ("run", "mpcompat run -- python "
                             "train.py"), ("explain", "mpcompat explain mypkg.data:train_dataset")):
        proc = _mpcompat(command, "--help")
        assert proc.returncode == 0 and example in proc.stdout, proc.stdout


def test_demo_list_and_selection_by_number():
    listing = _mpcompat("demo", "--list")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert lines[0].startswith(" 1. Pool(spawn).map over records") and "views_pool" in lines[0]
    assert "standard library only" in lines[0]
    assert any("needs torch" in line for line in lines)
    numbers = [int(line.split(".")[0]) for line in lines]
    assert numbers == list(range(1, len(lines) + 1))
    picked = _mpcompat("demo", "--list", "3", "1", "views")
    assert [l.split(".")[0].strip() for l in picked.stdout.splitlines()] == ["1", "3"]
    unknown = _mpcompat("demo", "99", "nothing_like_this")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.startswith("mpcompat demo: no scenario matches 99, nothing_like_this")


TYPO_SCRIPT = """
import multiprocessing, sys
import mpcompat

def child_state(_):
    import mpcompat
    return mpcompat.is_active()

if __name__ == "__main__":
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        print(pool.map(child_state, range(4)))
    rows = {p.name: p.state for p in mpcompat.status().patches}
    print(rows["multiprocessing.pickling_notes"], rows["multiprocessing.bootstrap_notes"])
"""


def test_a_typo_in_disabled_patches_warns_once_per_process_tree_with_a_suggestion(tmp_path):
    script = tmp_path / "typo_script.py"
    script.write_text(TYPO_SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path),
                          env=child_env(MPCOMPAT_DISABLED_PATCHES="multiprocessing.pickling-notes,"
                                                                  "multiprocessing.bootstrap_note"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["[True, True, True, True]", "disabled applied"]
    warnings = [l for l in proc.stderr.splitlines() if "MpcompatWarning" in l]
    assert len(warnings) == 1, proc.stderr  # the parent said it; the two children did not
    assert warnings[0].endswith(
        "unknown patch name 'multiprocessing.bootstrap_note' ignored (did you mean "
        "multiprocessing.bootstrap_notes?); `mpcompat status` lists the patches")  # brief
    # attributed to the user's line, not to a line of mpcompat
    assert warnings[0].startswith(str(script) + ":3: MpcompatWarning: ")
    assert "mpcompat/" not in proc.stderr
