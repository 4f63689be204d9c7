"""The `caffemem` command: a thin layer over :mod:`caffemem.api`.

One module per command, each a plain ``@click.command``; this file lists them once and
attaches them with ``main.add_command`` (no registration by import side effect, no command
module imports ``main``).  Exit codes live in :mod:`caffemem.cli.common`.
"""

from __future__ import annotations

import gc

import click

from caffemem._version import __version__
from caffemem.cli.analyze import analyze_command
from caffemem.cli.check import check_command
from caffemem.cli.common import EXIT_CODES_HELP, CaffememGroup
from caffemem.cli.fit import fit_command
from caffemem.cli.optimize import optimize_command
from caffemem.cli.patch import patch_command
from caffemem.cli.verify import verify_command


@click.group(cls=CaffememGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="caffemem")
def main() -> None:
    """Profile and optimize the GPU memory of Caffe networks, statically."""
    # One short run that builds millions of small objects and almost no cycles: the cyclic
    # collector would rescan them over and over (a third of the time on a deep net).
    gc.disable()


for _command in (analyze_command, optimize_command, verify_command, check_command, fit_command, patch_command):
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    main()
