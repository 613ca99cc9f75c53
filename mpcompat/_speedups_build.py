"""Builds the optional C extension ``mpcompat._speedups`` (``mpcompat/_speedups.c``).

Two callers:
- hatchling, as the wheel's build hook (``pyproject.toml``): the extension goes into the wheel,
  which is then tagged for this interpreter and platform;
- ``python -m mpcompat._speedups_build``: builds it next to the sources, for a source checkout
  on ``PYTHONPATH`` (``.ci/setup`` does this for each virtualenv).

A failed build (no C compiler, no Python headers) warns and leaves mpcompat pure Python, which
behaves the same and is slower on view-heavy payloads; ``MPCOMPAT_NO_SPEEDUPS=1`` skips the
build. Uses setuptools' ``build_ext`` (it knows each platform's compiler). Not part of the
installed package.
"""
import os
import shutil
import sys
import sysconfig
import tempfile

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "_speedups.c")
MODULE = "mpcompat._speedups"
SKIP_ENV = "MPCOMPAT_NO_SPEEDUPS"


def skipped():
    """Whether ``MPCOMPAT_NO_SPEEDUPS`` asks for no C extension (parsed as
    ``mpcompat.activation.env_flag`` does: a build must not import the package it builds)."""
    return os.environ.get(SKIP_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def filename():
    """The extension's file name for this interpreter (``_speedups.cpython-311-...so``)."""
    return "_speedups" + sysconfig.get_config_var("EXT_SUFFIX")


def build(target_dir):
    """Compile the extension into ``target_dir``; return its path.

    Raises whatever the compiler step raises (``ImportError`` without setuptools,
    ``distutils`` errors without a compiler)."""
    from setuptools import Distribution, Extension

    dist = Distribution({"name": "mpcompat", "ext_modules": [Extension(
        MODULE, [os.path.relpath(SOURCE)], extra_compile_args=_warning_flags())]})
    cmd = dist.get_command_obj("build_ext")
    cmd.build_lib = target_dir
    cmd.build_temp = tempfile.mkdtemp(prefix="mpcompat-build-")
    try:
        cmd.ensure_finalized()
        cmd.run()
    finally:
        shutil.rmtree(cmd.build_temp, ignore_errors=True)
    return os.path.join(target_dir, "mpcompat", filename())


def _warning_flags():
    return [] if sys.platform == "win32" else ["-Wall", "-Wno-unused-parameter"]


class SpeedupsBuildHook(BuildHookInterface):
    """hatchling build hook: put the compiled extension into the wheel when it builds."""

    def initialize(self, version, build_data):
        """Compile into the hook's build directory and add the result to the wheel."""
        if self.target_name != "wheel" or version == "editable" or skipped():
            return
        self._out = tempfile.mkdtemp(prefix="mpcompat-ext-")
        cwd = os.getcwd()
        os.chdir(self.root)
        try:
            built = build(self._out)
        except Exception as exc:  # noqa: BLE001 - any failure leaves the wheel pure Python
            self.app.display_warning(
                "mpcompat: C extension not built (%s: %s); the wheel is pure Python, which "
                "works the same and pickles view-heavy payloads more slowly"
                % (type(exc).__name__, exc))
            return
        finally:
            os.chdir(cwd)
        build_data["force_include"][built] = "mpcompat/" + filename()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version, build_data, artifact_path):
        """Remove the compiled extension's temporary directory once the wheel is written."""
        out = getattr(self, "_out", None)
        if out:
            shutil.rmtree(out, ignore_errors=True)


def main():
    """``python -m mpcompat._speedups_build``: build the extension into the source tree."""
    if skipped():
        print("mpcompat: %s is set, C extension not built" % SKIP_ENV)
        return 0
    os.chdir(os.path.dirname(HERE))
    try:
        built = build(os.path.dirname(HERE))
    except Exception as exc:  # noqa: BLE001 - reported, mpcompat stays pure Python
        print("mpcompat: C extension not built (%s: %s)" % (type(exc).__name__, exc),
              file=sys.stderr)
        return 1
    print("mpcompat: built %s" % os.path.relpath(built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
