"""The ``mpcompat`` command line: status, demo, explain, run, enable, disable.

Each subcommand's module is imported only when it runs."""
import argparse
import os
import sys

# subcommand -> (module, one-line help, examples); the module provides main(args) -> exit code
# and, if the subcommand has options, add_arguments(parser).
COMMANDS = {
    "status": ("mpcompat.cli.status", "print what mpcompat does in this interpreter",
               ["mpcompat status", "MPCOMPAT_DISABLE=1 mpcompat status"]),
    "demo": ("mpcompat.cli.demo",
             "run the failure scenarios in child processes, without and with mpcompat",
             ["mpcompat demo", "mpcompat demo --list", "mpcompat demo 1 3",
              "mpcompat demo nuscenes -v"]),
    "explain": ("mpcompat.cli.explain", "explain why module:attribute cannot be pickled",
                ["mpcompat explain mypkg.data:train_dataset",
                 "mpcompat explain train:loader.dataset --limit 20"]),
    "run": ("mpcompat.cli.launcher", "run a command with mpcompat active in it and its children",
            ["mpcompat run -- python train.py",
             "mpcompat run --start-method spawn -- python train.py --launcher pytorch"]),
    "enable": ("mpcompat.cli.autostart", "turn auto-activation at interpreter start on",
               ["mpcompat enable"]),
    "disable": ("mpcompat.cli.autostart", "turn auto-activation at interpreter start off",
                ["mpcompat disable", "python -c \"import mpcompat\"  # still activates it"]),
}
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what a command killed by a closed pipe exits with


def _examples(lines):
    return "examples:\n" + "\n".join("  " + line for line in lines)


def main(argv=None):
    """Run the command line; return the exit code."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (mpcompat status | head -1): stop quietly. Point stdout at
        # devnull so that the interpreter's final flush does not raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return BROKEN_PIPE_EXIT


def _main(argv):
    import importlib
    from mpcompat import activation
    activation.note_command()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(
        prog="mpcompat", description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_examples([ex for _, _, examples in COMMANDS.values() for ex in examples[:1]]
                         + ["mpcompat COMMAND --help"]))
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    module = None
    for name, (module_name, help_text, examples) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text,
                                    epilog=_examples(examples),
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        if argv[:1] == [name]:
            module = importlib.import_module(module_name)
            getattr(module, "add_arguments", lambda parser: None)(sub_parser)
    try:
        args = parser.parse_args(argv)
    finally:
        sys.stdout.flush()  # --help exits from here: a closed pipe must show inside the handler
    code = module.main(args) or 0
    sys.stdout.flush()  # a closed pipe shows here, inside the handler
    return code
