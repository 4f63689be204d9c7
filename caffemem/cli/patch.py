"""`caffemem patch CAFFE_DIR [--check] [--revert]`: patch a Caffe source tree so that
nets carrying `optimize`'s slot table run in that memory (issue 14; the work is done by
:mod:`caffemem.runtime`).  Errors are CaffememError (the group maps them to exit 2)."""

from __future__ import annotations

import click

from caffemem import runtime
from caffemem.cli.common import EXIT_CODES_HELP, EXIT_FINDING, echo_wrapped, reports_errors
from caffemem.errors import CaffememError


@click.command("patch", epilog=EXIT_CODES_HELP)
@click.argument("caffe_dir", type=click.Path(file_okay=False, path_type=str))
@click.option("--check", is_flag=True, help="Only say whether (and which version of) the patch is applied: exit 0 patched, 1 not.")
@click.option("--revert", is_flag=True, help="Give back the original files, byte for byte.")
@reports_errors
def patch_command(caffe_dir: str, check: bool, revert: bool) -> None:
    """Patch the Caffe source tree CAFFE_DIR (BVLC master or the yjxiong/caffe
    action_recog fork) so that a net whose prototxt has `caffemem optimize`'s
    mem_param slot table runs in exactly that memory. Rebuild Caffe afterwards.
    Applying is all or nothing and idempotent, even under Ctrl-C; --revert restores the
    tree. A run killed outright leaves a journal: patch then finishes it, --revert undoes it.

    \b
    Examples:
      caffemem patch ~/caffe && make -C ~/caffe -j4 all tools
      caffemem patch ~/caffe --check
    """
    if check and revert:
        raise CaffememError("--check and --revert exclude each other")
    if check:
        status = runtime.patch_status(caffe_dir)
        echo_wrapped(status.describe())
        raise SystemExit(0 if status.applied else EXIT_FINDING)
    if revert:
        before = runtime.patch_status(caffe_dir)
        status = runtime.revert_patch(caffe_dir)
        touched = before.changed or before.interrupted  # a clean tree: revert_patch wrote nothing
        echo_wrapped(f"{caffe_dir}: {status.describe()}" + (" (reverted; rebuild Caffe)" if touched else ": nothing to revert, nothing changed"))
        return
    before = runtime.patch_status(caffe_dir)
    status = runtime.apply_patch(caffe_dir)
    if before.applied:
        echo_wrapped(f"{caffe_dir}: {status.describe()} (already; nothing changed)")
    else:
        echo_wrapped(f"{caffe_dir}: {status.describe()}; now rebuild Caffe (e.g. make -j2 lib tools)")
