"""The ``fabricflow`` command.

Each subcommand lives in its own module under ``fabricflow/commands/``, named with its
one-line summary in :data:`fabricflow.commands.COMMANDS`, and provides ``register(parser)``
(adds its flags and sets ``func``) so that commands stay small and independent. Every
command accepts ``--json`` and then prints exactly one JSON object.

Exit codes: 0 success; 2 bad input (usage, :class:`~fabricflow.errors.SpecError` and the
other input errors, memory budget); 1 an output cannot be written
(:class:`~fabricflow.errors.OutputError`) or an internal error; 130 interrupted (SIGINT or
SIGTERM: files already written stay, partial ones never appear); 141 stdout closed early
(``fabricflow presets | head -1``).

Start-up stays light: ``import fabricflow`` is lazy, and the CLI imports only the module of
the command that runs (:func:`build_parser`); ``--help`` and a misspelled command read the
table and import none. A command module imports what it needs (JAX, SciPy, xarray) at its
top, so ``fabricflow step --help`` loads JAX while ``--help`` and ``presets`` never do.
The command line (not in-process callers of :func:`main`) turns on JAX's persistent
compilation cache (:mod:`fabricflow.jax_cache`), so the second run of a command skips
compilation; ``FABRICFLOW_NO_JAX_CACHE=1`` opts out.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import json
import os
import re
import signal
import sys
import traceback
import warnings

from fabricflow.atomic import recording
from fabricflow.commands import COMMANDS, interrupts, module_name
from fabricflow.commands.interrupts import Interrupted
from fabricflow.errors import FabricflowError, OutputError, UnitWarning, did_you_mean
from fabricflow.files import to_jsonable
from fabricflow.jax_cache import enable_persistent_cache
from fabricflow.memory_budget import out_of_memory

EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a killed writer


def _interrupted_at_start(signum, frame) -> None:
    """SIGINT/SIGTERM outside :func:`main` (imports before it, teardown after): leave.

    Before main nothing ran; after it the command's report is out (and stays the only JSON
    object on stdout).
    """
    name = signal.Signals(signum).name
    wants_json = any(len(arg) >= 4 and "--json".startswith(arg) for arg in sys.argv[1:])
    if wants_json and not interrupts.reported():
        text = json.dumps(
            {
                "error": "Interrupted",
                "completed": [],
                "message": f"interrupted by {name}; nothing completed",
            }
        )
        os.write(sys.stdout.fileno(), (text + "\n").encode())
    else:
        os.write(sys.stderr.fileno(), f"fabricflow: interrupted by {name}\n".encode())
    os._exit(EXIT_INTERRUPTED)


_AS_COMMAND = __name__ == "__main__" or os.path.basename(sys.argv[0]) in (
    "fabricflow",
    "fabricflow.exe",
)
if _AS_COMMAND and "__mp_main__" in sys.modules:
    # A worker process that multiprocessing's spawn starts for the command: it imports the
    # parent's main module (as __mp_main__, with the parent's sys.argv). Ctrl-C reaches the
    # whole process group and the parent stops its workers and reports for them: ignore
    # SIGINT from the first moment (a KeyboardInterrupt traceback while it imports), and
    # install no handler that would print a report of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
elif _AS_COMMAND:
    # run as the command (not imported by a program): cover the imports before main()
    for _signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_signum, _interrupted_at_start)

# A value that argparse would take for an option because it starts with "-": a negative
# number with or without a unit (-1ms, -0.5, -.5, -8MiB) or a signed inf/nan.
_NEGATIVE_VALUE = re.compile(r"^-(\d|\.\d|inf|nan)", re.IGNORECASE)


class UsageError(Exception):
    """A command line argparse rejects (missing flag, invalid choice, bad int)."""

    def __init__(self, parser: argparse.ArgumentParser, message: str):
        self.parser = parser
        super().__init__(message)


# argparse's wording of a value outside ``choices`` (commands, --recompute, --algorithm, ...).
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>.*?)' \(choose from (?P<choices>.*)\)")


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """``--help`` lists every option's default, as ``(default: X)`` after its help (or as
    its whole help when it has none), unless the help already names it. Switches that are
    off by default and options without a default (``None``) show none."""

    def _format_action(self, action):
        if action.help is None and self._shows_default(action):
            action = copy.copy(action)  # an option without help: its default is its help
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _get_help_string(self, action):
        text = action.help or ""
        if not self._shows_default(action) or "default" in text.lower():
            return text
        return text + " (default: %(default)s)"

    @staticmethod
    def _shows_default(action) -> bool:
        default = action.default
        return not (
            not action.option_strings
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or (isinstance(default, (list, tuple)) and not default)
        )


INT64_MAX = 2**63 - 1


def _int64(text: str) -> int:
    """An integer option's value: Python reads any length, but every count ends up in an
    int64 array (``--gpus 1180591620717411303424`` overflowed deep in the step model)."""
    value = int(text)
    if abs(value) > INT64_MAX:
        raise argparse.ArgumentTypeError(f"{text} is too large: at most {INT64_MAX:,}")
    return value


_int64.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"


class _ArgumentParser(argparse.ArgumentParser):
    """Raises :class:`UsageError` instead of exiting, so that ``--json`` can report it; a
    value outside the choices gets the closest ones suggested; ``--help`` shows every
    default (:class:`DefaultsHelpFormatter`); every ``type=int`` option is bounded to int64.
    Subcommand parsers are of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if kwargs.get("type") is int:
            kwargs["type"] = _int64
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = [c.strip().strip("'") for c in match["choices"].split(",")]
            message += did_you_mean(match["value"], choices)
        raise UsageError(self, message)


def _suggest_flags(parser: argparse.ArgumentParser, argv: list[str], message: str) -> str:
    """``message`` with the closest flags of the command being run suggested for every
    option on the command line that it does not have (a misspelled ``--fabirc`` shows up
    as "unrecognized arguments", or hides behind "the following arguments are required:
    --fabric")."""
    commands = _subparsers(parser)
    position = next((i for i, token in enumerate(argv) if token in commands), None)
    if position is None:
        return message
    flags = [flag for action in commands[argv[position]]._actions for flag in action.option_strings]
    for token in argv[position + 1 :]:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if not name.startswith("--") or any(flag.startswith(name) for flag in flags):
            continue  # a value, a short flag, or a flag (argparse takes unique prefixes)
        hint = did_you_mean(name, flags)
        message += f"; unknown option {name}" + (f" ({hint[2:]})" if hint else "")
    return message


def _wants_json(argv: list[str]) -> bool:
    return any(len(arg) >= 4 and "--json".startswith(arg) for arg in argv)


def build_parser(*commands: str) -> argparse.ArgumentParser:
    """The ``fabricflow`` parser: every command of :data:`~fabricflow.commands.COMMANDS`
    listed with its summary; the ``commands`` named get their whole parser (their modules
    are imported), the others only their name, which is all that ``--help`` and a
    misspelled command need."""
    parser = _ArgumentParser(
        prog="fabricflow",
        description="Flow-level network planning for AI-training clusters.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name, summary in COMMANDS.items():
        command = subparsers.add_parser(name, help=summary)
        if name in commands:
            importlib.import_module(module_name(name)).register(command)
    return parser


def _command_of(argv: list[str]) -> tuple[str, ...]:
    """The command that ``argv`` runs (its first word that names one), as a tuple of
    at most one name for :func:`build_parser`."""
    return next(((token,) for token in argv if token in COMMANDS), ())


def _value_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Option strings of ``parser`` (not its subparsers) that take exactly one value."""
    return {
        flag
        for action in parser._actions
        if action.option_strings
        and action.nargs is None
        and isinstance(action, (argparse._StoreAction, argparse._AppendAction))
        for flag in action.option_strings
    }


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(
        (
            dict(action.choices)
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
        ),
        {},
    )


def _attach_negative_values(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``--duration -1ms`` -> ``--duration=-1ms``, so that argparse hands the value over.

    argparse reads a token starting with ``-`` as an option and answers "expected one
    argument", hiding the real problem ("duration must be > 0") that the command reports.
    Only the flags of the command being run that take a value are rewritten.
    """
    commands = _subparsers(parser)
    flags = _value_flags(parser)
    out: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if token == "--":
            out.extend(argv[index:])
            break
        if token in commands:  # the flags of this command from here on
            flags = _value_flags(commands[token])
            commands = {}
        following = argv[index + 1] if index + 1 < len(argv) else None
        if following is not None and _NEGATIVE_VALUE.match(following) and "=" not in token:
            # argparse accepts unique prefixes of long options (--dur for --duration)
            known = token in flags or (
                token.startswith("--")
                and len([flag for flag in flags if flag.startswith(token)]) == 1
            )
            if known:
                out.append(f"{token}={following}")
                index += 2
                continue
        out.append(token)
        index += 1
    return out


def _report(args, argv: list[str], error: str, message: str, **extra) -> None:
    """One JSON object on stdout under --json, else ``fabricflow CMD: error: ...`` on stderr."""
    if getattr(args, "json", False) or (args is None and _wants_json(argv)):
        interrupts.mark_reported()
        print(json.dumps({"error": error, "message": message, **extra}))
    else:
        command = getattr(args, "command", None)
        prefix = f"fabricflow {command}" if command else "fabricflow"
        print(f"{prefix}: error: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so that the exit-time flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def main(argv: list[str] | None = None, *, hard_exit: bool | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code.

    ``hard_exit`` (default: when ``argv`` is None, i.e. the real command line): after an
    interrupt, flush and leave with ``os._exit(130)`` rather than running interpreter
    teardown while XLA's threads are alive, which can crash. In-process callers (tests)
    get 130 returned.
    """
    if hard_exit is None:
        hard_exit = argv is None
    if argv is None:  # the real command (not a program calling main): cache compiled kernels
        enable_persistent_cache()
    argv = sys.argv[1:] if argv is None else list(argv)
    with interrupts.handling(), _unit_warnings():
        try:
            return _main(argv)
        except Interrupted as interrupt:
            name = signal.Signals(interrupt.signum).name
            return _interrupted(getattr(interrupt, "args_namespace", None), argv, name, hard_exit)
        except KeyboardInterrupt:  # raised by other code (a debugger, a test) as SIGINT
            return _interrupted(None, argv, "SIGINT", hard_exit)


@contextlib.contextmanager
def _unit_warnings():
    """Print each :class:`~fabricflow.errors.UnitWarning` (a quantity far from any real
    part) as one ``fabricflow: warning: ...`` line on stderr, every time it is raised;
    other warnings keep Python's display."""
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UnitWarning):
            print(f"fabricflow: warning: {message}", file=sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always", UnitWarning)
        warnings.showwarning = show
        yield


class StdoutWriteError(Exception):
    """Writing the command's output to stdout failed (a full disk, ``> /dev/full``, an I/O
    error). Not an ``OSError``, so that no command's own file handling takes it for a
    failure of the file it reads or writes."""


class _GuardedStdout:
    """``sys.stdout`` whose failed writes raise :class:`StdoutWriteError` (EPIPE stays a
    ``BrokenPipeError``, handled as a closed pipe); everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutWriteError(error.strerror or str(error)) from error

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutWriteError(error.strerror or str(error)) from error

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _main(argv: list[str]) -> int:
    """:func:`_run`, then stdout flushed; a closed pipe is a quiet exit 141, a failed
    write to stdout (no space left) one line on stderr and exit 1."""
    stream = sys.stdout
    sys.stdout = _GuardedStdout(stream)
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except StdoutWriteError as error:
        _silence_stdout()  # the interpreter's exit-time flush would fail again
        print(f"fabricflow: error: cannot write the output to stdout: {error}", file=sys.stderr)
        return 1
    finally:
        if isinstance(sys.stdout, _GuardedStdout):
            sys.stdout = stream
    late = interrupts.received()
    if code == 0 and late is not None:
        # library code swallowed the signal and the command finished anyway: its output
        # is whole, but the run was asked to stop
        print(
            f"fabricflow: {signal.Signals(late).name} arrived after the run had finished its work",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return code


def whole_outputs(args) -> list:
    """What the command finished (``mark_done``) and the files it wrote that are on disk
    now: each was recorded as it was renamed into place, whole (a temporary file the
    command removed again, such as a figure embedded in a report, is no longer there)."""
    completed = list(getattr(args, "completed", []) or [])
    for path in getattr(args, "written", []) or []:
        if path not in completed and os.path.isfile(path):
            completed.append(path)
    return completed


def _interrupted(args, argv: list[str], name: str, hard_exit: bool) -> int:
    """Report an interrupt (one JSON object under --json) and leave with 130."""
    interrupts.ignore()
    completed = whole_outputs(args)
    partial = dict(getattr(args, "partial", {}) or {})
    # a command may say what it holds so far: a message and counts (sweep: points stored)
    summary = dict(getattr(args, "summary", {}) or {})
    said = summary.pop("message", None)
    message = f"interrupted by {name}; " + (
        said
        or (f"completed: {', '.join(map(str, completed))}" if completed else "nothing completed")
    )
    extra: dict = {"completed": completed, **summary}
    if partial:
        extra["partial"] = partial
    try:
        if interrupts.reported():  # the command's JSON object is out: keep it the only one
            print(f"fabricflow: {message}", file=sys.stderr)
        elif getattr(args, "json", False) or (args is None and _wants_json(argv)):
            print(json.dumps({"error": "Interrupted", "message": message, **to_jsonable(extra)}))
        else:
            command = getattr(args, "command", None)
            print(f"fabricflow{' ' + command if command else ''}: {message}", file=sys.stderr)
    except BrokenPipeError:
        _silence_stdout()
    if hard_exit:
        _flush()
        os._exit(EXIT_INTERRUPTED)
    return EXIT_INTERRUPTED


def _run(argv: list[str]) -> int:
    parser = build_parser(*_command_of(argv))
    try:
        args = parser.parse_args(_attach_negative_values(argv, parser))
    except UsageError as error:
        text = _suggest_flags(parser, argv, str(error))
        if _wants_json(argv):
            interrupts.mark_reported()
            print(json.dumps({"error": "UsageError", "message": f"{error.parser.prog}: {text}"}))
        else:
            error.parser.print_usage(sys.stderr)
            print(f"{error.parser.prog}: error: {text}", file=sys.stderr)
        return 2
    # Commands record what they finished here (and every file written whole is recorded
    # as it is renamed into place), so that an interrupt can report exactly that.
    args.completed = []
    args.written = []  # every file renamed into place (temporary ones of a command too)
    args.partial = {}
    # lazy: commands.common reads fabrics (fabric.spec); --help and a misspelled command need none
    from fabricflow.commands.common import check_destinations, finish_outputs, reset_outputs

    reset_outputs()
    try:
        with recording(args.written):
            check_destinations(args, _subparsers(parser)[args.command])
            code = int(args.func(args) or 0)
        return finish_outputs(args, code)
    except Interrupted as interrupt:
        interrupt.args_namespace = args
        raise
    except OutputError as error:
        _report(args, argv, type(error).__name__, str(error))
        return 1
    except FabricflowError as error:
        _report(args, argv, type(error).__name__, str(error))
        return 2
    except MemoryError as error:  # a raw allocation failure: name what ran out
        named = out_of_memory(error, f"fabricflow {args.command}")
        _report(args, argv, type(named).__name__, str(named))
        return 2
    except (BrokenPipeError, StdoutWriteError):
        raise
    except Exception as error:  # a bug, not bad input: --json still gets one object
        if not getattr(args, "json", False):
            raise
        traceback.print_exc()
        interrupts.mark_reported()
        print(json.dumps({"error": "InternalError", "message": f"{type(error).__name__}: {error}"}))
        return 1


if __name__ == "__main__":
    sys.exit(main())
