"""The ``society`` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from controller.errors import SocietyError
from controller.settings import Settings, installed
from ledger.errors import LedgerError
from ledger.terminal import terminal_safe

EXIT_ERROR = 1
"""A typed error escaped a command; a command may name its own (``society run``: 2, it could not
start) with ``set_defaults(error_exit=...)``."""


def build_parser() -> argparse.ArgumentParser:
    from controller.cli import (
        cluster_commands,
        ledger_commands,
        profile_commands,
        replay_command,
        run_commands,
        suite_commands,
        temporal_command,
        view_commands,
    )

    parser = argparse.ArgumentParser(
        prog="society",
        description=(
            "Run societies of autonomous agents as experiments, and check the signed ledger "
            "each run leaves behind."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_commands.add_commands(commands)
    replay_command.add_commands(commands)
    ledger_commands.add_commands(commands)
    suite_commands.add_commands(commands)
    view_commands.add_commands(commands)
    profile_commands.add_commands(commands)
    cluster_commands.add_commands(commands)
    temporal_command.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with installed(Settings.read()):  # the command's one read of its environment
        parser = build_parser()
        args = parser.parse_args(argv)
        code = _handle(args)
    if argv is None and "temporalio" in sys.modules:  # as the `society` program only
        # The command's work is done and reported. The Temporal SDK's native runtime has been
        # seen to crash (SIGSEGV) while the interpreter tears its threads down, which would turn
        # a printed success into a failed exit; leave without running that teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _handle(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; a typed error is reported on one line, no traceback."""
    try:
        code: int = args.handler(args)
    except BrokenPipeError:
        # `society ledger show DIR | head`: the reader left; that is not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (SocietyError, LedgerError) as error:
        # A typed error is the user's to act on: what happened and the next step, no traceback.
        shown = "\n".join(terminal_safe(line) for line in str(error).split("\n"))
        print(f"society {_command(args)}: error: {shown}", file=sys.stderr, flush=True)
        code = getattr(args, "error_exit", EXIT_ERROR)
    return code


def _command(args: argparse.Namespace) -> str:
    """The command as typed: ``run``, or ``cluster up`` (a group's ``dest`` is
    ``<group>_command``)."""
    action = getattr(args, f"{args.command}_command", None)
    return args.command if action is None else f"{args.command} {action}"


if __name__ == "__main__":
    sys.exit(main())
