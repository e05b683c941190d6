"""Usage errors of ``cytearc-vfs``: one line (or one JSON object) naming the command,
what was wrong and, where it can tell, what was meant.

argparse's own messages are kept; this adds what a person at a terminal
needs: the command that refused (not the program), the option a typo was
close to, how a value starting with ``-`` is given, and never the value of
a credential option, even under a mistyped name.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["_Parser"]

#: options whose values are credentials: never echoed in an error
_SECRET_OPTIONS = ("--storage-options", "--source-storage-options", "--destination-storage-options")


def _hidden_values(arguments: Sequence[str]) -> list[str]:
    """``arguments`` with the values of credential options replaced.

    argparse echoes arguments it does not know; given to a command that has
    no such option, ``--storage-options '{"secret_access_key": ...}'`` would
    put the secret on stderr and in logs.
    """
    shown: list[str] = []
    follows_secret = False
    for argument in arguments:
        name, equals, _ = argument.partition("=")
        if follows_secret and not argument.startswith("-"):
            shown.append("<value not shown>")
        elif equals and _is_secret_option(name):
            shown.append(f"{name}=<value not shown>")
        else:
            shown.append(argument)
        follows_secret = _is_secret_option(argument)
    return shown


def _is_secret_option(name: str) -> bool:
    """Whether ``name`` is a credential option, or a mistyped one (``--storage-optoins``):
    a typo is refused as unknown, and its value is the same secret."""
    if not name.startswith("--"):
        return False
    return (
        name in _SECRET_OPTIONS
        or "storage" in name
        or bool(difflib.get_close_matches(name, _SECRET_OPTIONS, n=1, cutoff=0.75))
    )


def _chosen_parser(parser: argparse.ArgumentParser, parsed: Any) -> argparse.ArgumentParser:
    """The parser of the innermost command ``parsed`` selected (``array info``'s for
    ``cytearc-vfs array info ...``); ``parser`` itself when none was."""
    while True:
        commands = [
            action
            for action in parser._actions  # argparse keeps its subcommands nowhere public
            if isinstance(action, argparse._SubParsersAction)
        ]
        chosen = getattr(parsed, commands[0].dest, None) if commands else None
        if chosen is None or chosen not in commands[0].choices:
            return parser
        parser = commands[0].choices[chosen]


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every command's parser below ``parser`` (``array resize``'s too), in help order."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                found.extend(_commands(command) or [command])
    return found


def _commands_taking(root: argparse.ArgumentParser, option: str) -> list[str]:
    """The commands (``write``, ``array resize``) whose parsers below ``root`` take
    ``option``."""
    program = root.prog.split()[0]
    return [
        command.prog.removeprefix(program).strip()
        for command in _commands(root)
        if any(option in action.option_strings for action in command._actions)
    ]


def _listed(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _suggestion(
    parser: argparse.ArgumentParser, extras: Sequence[str], root: argparse.ArgumentParser
) -> str:
    """``" (did you mean --json?)"`` for a mistyped option of ``parser``, or what takes
    an option of other commands (``--mem-budget`` given to ``info``), else ``""``.

    Only option names are compared and shown, never a value (which may be a
    credential).
    """
    known = [name for action in parser._actions for name in action.option_strings]
    for extra in extras:
        if not extra.startswith("--"):
            continue
        name = extra.partition("=")[0]
        elsewhere = _commands_taking(root, name)
        if elsewhere:
            # right for another command: a near name of this one ("--mem-budget" and
            # "--debug") is no typo, and suggesting it misleads
            command = parser.prog.removeprefix(root.prog.split()[0]).strip()
            return f" ({name} is an option of {_listed(elsewhere)}, not of {command})"
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        if close:
            return f" (did you mean {close[0]}?)"
    return ""


def _dash_value_follows(option: str, arguments: Sequence[str]) -> bool:
    """Whether ``option`` is followed on the command line by a word starting with ``-``
    that is no option of the program (``--low -2,0``, ``--mem-budget -1G``)."""
    return any(
        word == option and following.startswith("-") and not following.startswith("--")
        for word, following in itertools.pairwise(arguments)
    )


def _dashed_path(parser: argparse.ArgumentParser, arguments: Sequence[str]) -> str | None:
    """The first word of ``arguments`` that starts with one ``-`` and is no option of
    ``parser`` nor a negative number: a path such as ``-new.zarr``, or ``None``."""
    known = {name for action in parser._actions for name in action.option_strings}
    for word in arguments:
        if word == "--":
            return None
        if (
            word.startswith("-")
            and not word.startswith("--")
            and len(word) > 2
            and word not in known
            and not re.fullmatch(r"-[\d.,]+[A-Za-z]?", word)
        ):
            return word
    return None


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors honour ``--json`` (one JSON object)."""

    json_errors = False
    arguments: Sequence[str] = ()
    """The command line being parsed, for the hints of :meth:`error`."""

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: Any = None
    ) -> argparse.Namespace:
        """Parse like argparse; unknown arguments are refused with credential values hidden."""
        _Parser.arguments = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # refused by the command that was given, not the program: its name in the
            # line and the JSON, its --help, and the option that was probably meant
            chosen = _chosen_parser(self, parsed)
            chosen.error(
                "unrecognized arguments: "
                + " ".join(_hidden_values(extras))
                + _suggestion(chosen, extras, self)
            )
        assert isinstance(parsed, argparse.Namespace)
        return parsed

    def error(self, message: str) -> NoReturn:
        expected = re.fullmatch(r"argument (--[\w-]+)(?:/\S+)?: expected one argument", message)
        if expected and _dash_value_follows(expected.group(1), _Parser.arguments):
            # argparse takes "-1,0" or "-1G" for an option of its own, so "--low -1,0"
            # reads as --low without a value: say how such a value is given
            option = expected.group(1)
            message += f" (a value that starts with '-' is written {option}=VALUE)"
        choice = re.fullmatch(r"argument \S+: invalid choice: '(.*)' \(choose from (.*)\)", message)
        if choice:
            # a mistyped command or action: name the one meant before the whole list
            given, listed = choice.group(1), re.findall(r"'([^']*)'", choice.group(2))
            close = [name for name in listed if name.lower() == given.lower()] or (
                difflib.get_close_matches(given.lower(), listed, n=1, cutoff=0.6)
            )
            if close:
                message = message.replace(
                    f"'{given}' (choose", f"'{given}' (did you mean {close[0]!r}? choose", 1
                )
        if message.startswith("the following arguments are required"):
            dashed = _dashed_path(self, _Parser.arguments)
            if dashed is not None:
                # argparse took it for an option it does not know, so the path is "missing"
                message += f" (a path that starts with '-' is written ./{dashed}, or after --)"
        if _Parser.json_errors:
            # the command's first word, as every other error of it reports it
            # ("anndata" for "cytearc-vfs anndata ls"); "" before any command
            words = self.prog.split()
            payload = {
                "ok": False,
                "command": words[1] if len(words) > 1 else "",
                "error": "UsageError",
                "category": "refused",
                "exitCode": 2,
                "message": message,
            }
            sys.stdout.write(json.dumps(payload, indent=2) + "\n")
        # one line, like every other error; --help shows the usage
        self.exit(2, f"{self.prog}: {message}; run '{self.prog} --help' for the options\n")
