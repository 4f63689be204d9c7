"""The `caffemem` command's entry point, for the script and for `python -m caffemem`.

It keeps the process-level promises before anything is imported: Ctrl-C while the
interpreter is still importing caffemem (the first ~0.2 s) is one line and exit 130, not
a KeyboardInterrupt traceback from the middle of an import; a standard stream that was
closed (`2>&-`) is reopened on /dev/null so that no file the run opens takes its number
(a closed standard output fails the run's first write instead of going nowhere); and a
standard output whose encoding cannot hold the report's characters (`LC_ALL=C`,
`PYTHONIOENCODING=ascii`) gets them replaced rather than failing mid-report.  Once a
command begins, cli.common.raise_on_interrupt hands Ctrl-C back to Python, so that the
command's cleanup runs.
"""

import os
import sys

try:  # the C module: `signal` itself takes milliseconds to build its enums, a window for Ctrl-C
    from _signal import SIGINT
    from _signal import signal as set_handler
except ImportError:  # pragma: no cover (not CPython)
    from signal import SIGINT
    from signal import signal as set_handler


def run() -> None:
    _keep_the_working_directory_off_the_import_path()
    _reopen_closed_standard_streams()
    _replace_what_stdout_cannot_encode()
    from caffemem.cli import main

    main(prog_name="caffemem")


def _interrupted_while_starting(signum, frame) -> None:  # pragma: no cover (a real Ctrl-C)
    """Nothing has been written yet: say so in one line and leave at once."""
    try:
        os.write(2, b"caffemem: interrupted\n")
    finally:
        os._exit(130)


_interrupted_while_starting.caffemem_startup = True  # type: ignore[attr-defined]  # read by cli.common.raise_on_interrupt
set_handler(SIGINT, _interrupted_while_starting)  # first of all: run() comes after the imports


def _keep_the_working_directory_off_the_import_path() -> None:
    """``python -m caffemem`` puts the working directory first on sys.path (an empty entry
    means it too): a ``click/``, ``google/`` or ``grpc_tools/`` in the user's folder would
    then be imported as ours (issue 31).  caffemem itself is imported by now, and its
    modules load from its own folder whatever sys.path holds."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # a deleted working directory: nothing of it can be imported
        cwd = None
    first = sys.path[0] if sys.path else None
    sys.path[:] = [entry for entry in sys.path if entry]
    if first and cwd is not None and os.path.realpath(first) == cwd and sys.path and sys.path[0] == first:
        del sys.path[0]


def _reopen_closed_standard_streams() -> None:
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            # stdout read-only: its writes fail (EBADF) and the run reports it; stdin and
            # stderr as /dev/null: nothing to read, and the exit code still speaks.
            opened = os.open(os.devnull, os.O_RDONLY if fd in (0, 1) else os.O_WRONLY)
            if opened != fd:  # a lower number was closed too: it was reopened first
                os.dup2(opened, fd)
                os.close(opened)
            if fd == 1:
                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115 (lives as long as the process)
            elif fd == 2:
                sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115


def _replace_what_stdout_cannot_encode() -> None:
    import codecs

    stdout = sys.stdout
    if stdout is None or not hasattr(stdout, "reconfigure"):
        return
    try:
        utf8 = codecs.lookup(stdout.encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    # UTF-8: names read from the user's files as undecodable bytes go back out as those bytes.
    stdout.reconfigure(errors="surrogateescape" if utf8 else "replace")


if __name__ == "__main__":
    run()
