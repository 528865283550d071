"""Entry point of the packaged (PyInstaller) app: ``<bundle>/outrider``.

A frozen app has no ``python -m``: ``sys.executable`` is this bundle's binary, yet the app starts its helper
processes with it. So the arguments are dispatched before anything else is imported:

* ``--outrider-engine-process ...`` → the engine process (``outrider.worker.launch.worker_command()`` uses it);
* ``[-X opt] [-u] -m <module> args...`` → run an allow-listed module as ``__main__``
  (``outrider.worker.engine_process``, ``outrider.catalogue.download``, ...), the form the source tree uses, so
  ``DownloadManager.child_command`` (``[sys.executable, "-m", "outrider.catalogue.download"]``) needs no override;
* anything else → ``outrider.cli.main`` (the app with no arguments, ``--smoke-test``, ``generate``, ...).

Windowed builds (``console=False``; Windows' pythonw-like mode) have ``sys.stdout``/``sys.stderr`` set to None:
they are pointed at ``outrider-app.log`` in the log directory. A plain GUI start installs the crash handler.
"""

from __future__ import annotations

import multiprocessing
import runpy
import sys
import warnings

# Modules that may be run with ``-m`` through the bundle binary (helper processes; the CLI itself).
RUNNABLE_MODULES = frozenset({
    "outrider",
    "outrider.cli",
    "outrider.worker",
    "outrider.worker.engine_process",
    "outrider.catalogue.download",
})
# Interpreter options a helper command line may carry before ``-m``; they are accepted and ignored
# (the bundle sets UTF-8 mode itself).
_FLAG_OPTIONS = frozenset({"-u", "-B", "-E", "-s", "-S", "-I", "-O", "-OO", "-q"})
_VALUE_OPTIONS = frozenset({"-X", "-W"})


def split_module_argv(args: list[str]) -> tuple[str, list[str]] | None:
    """``[opts] -m MODULE rest`` → ``(MODULE, rest)``; None when ``args`` is not a ``-m`` command line."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            if i + 1 >= len(args):
                return None
            return args[i + 1], args[i + 2:]
        if arg.startswith("-m") and len(arg) > 2:  # -mpkg.mod
            return arg[2:], args[i + 1:]
        if arg in _VALUE_OPTIONS:
            i += 2
            continue
        if (arg[:2] in _VALUE_OPTIONS and len(arg) > 2) or arg in _FLAG_OPTIONS:
            i += 1
            continue
        return None
    return None


def run_module(module: str, rest: list[str]) -> int:
    """Run an allow-listed module as ``python -m`` would; its ``SystemExit`` ends the process."""
    if module not in RUNNABLE_MODULES:
        sys.stderr.write(f"outrider: -m {module}: not available in the packaged app\n")
        return 2
    sys.argv = [sys.executable, *rest]
    # `python -m outrider.catalogue.download` warns the same way: the package imports the module it names.
    warnings.filterwarnings("ignore", message=r".*found in sys\.modules after import of package",
                            category=RuntimeWarning)
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    multiprocessing.freeze_support()  # no-op unless a multiprocessing child: then it runs the child and exits

    from outrider.worker.launch import WORKER_FLAG, run_worker_if_requested

    if args[:1] == [WORKER_FLAG]:
        run_worker_if_requested(args)  # child_main() ends the process with os._exit
        return 3
    from outrider import crash

    crash.ensure_std_streams()
    module = split_module_argv(args)
    if module is not None:
        return run_module(*module)
    if not args:  # the desktop app itself (not --smoke-test, not a terminal command)
        crash.install_crash_handler()
    from outrider.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    raise SystemExit(main())
