"""The ``mpcompat`` command line: status, demo, explain, run, enable, disable.

Each subcommand lives in its own module and is imported only when it runs.
"""
import argparse
import sys

# subcommand -> (module, one-line help); the module provides add_arguments(parser) and
# main(args) -> exit code.
COMMANDS = {
    "status": ("mpcompat.cli_status", "print what mpcompat does in this interpreter"),
    "demo": ("mpcompat.demo", "run the failure scenarios in child processes, without and with mpcompat"),
    "explain": ("mpcompat.diagnose.cli", "explain why module:attribute cannot be pickled"),
    "run": ("mpcompat.launcher", "run a command with mpcompat active in it and its children"),
    "enable": ("mpcompat.autostart_cli", "turn auto-activation at interpreter start on"),
    "disable": ("mpcompat.autostart_cli", "turn auto-activation at interpreter start off"),
}


def main(argv=None):
    """Run the command line; return the exit code."""
    import importlib
    from mpcompat import activation
    activation.note_command()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="mpcompat", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if argv[:1] == [name]:
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(sub_parser)
    args = parser.parse_args(argv)
    return modules[args.command].main(args) or 0
