"""The `research` command line: the only module that knows about the terminal.

It parses flags, loads the configuration, runs the command, prints the result
on stdout and maps every error to one sentence on stderr and one exit code.
Only the standard library is imported at module level: `research --help` and
usage errors must never pay for litellm, trafilatura or docker.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dispatcher import interrupts
from dispatcher.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, ResearchError, UsageError

EXIT_TERMINATED = 143


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="research",
        description="Dispatch a sandboxed research agent over a git repository or the web.",
        epilog="Run 'research COMMAND --help' for a command's options. "
        "Configuration: 'research config path'.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="show the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    common = argparse.ArgumentParser(add_help=False)
    run_options = common.add_argument_group("run options")
    run_options.add_argument("--model", metavar="NAME",
                             help="alias from [models], litellm model string, or provider:model")
    run_options.add_argument("--max-steps", type=_positive_int, metavar="N",
                             help="model turns before the agent must answer (default 25)")
    run_options.add_argument("--no-cleanup", action="store_true", help="keep the workspace and print its path")
    run_options.add_argument("--json", action="store_true", help="print one JSON object instead of the answer")
    run_options.add_argument("--sandbox", choices=("local", "docker"),
                             help="workspace backend: a temp dir (local) or a locked-down container (docker)")
    _add_shared(common)

    repo = commands.add_parser("repo", parents=[common], help="answer a question about a git repository",
                               description="Clone a repository into a workspace and let an agent answer "
                               "QUESTION, citing path:line.")
    repo.add_argument("url", metavar="URL", help="any clonable URI (https, ssh, git://, file://) or a local path")
    repo.add_argument("question", metavar="QUESTION")
    repo.add_argument("--ref", help="branch, tag or commit to check out (fetched shallowly)")
    repo.add_argument("--full", action="store_true", help="clone the whole history instead of a shallow copy")
    repo.add_argument("--depth", type=_positive_int, metavar="N", help="history depth of a shallow clone (default 1)")

    web = commands.add_parser("web", parents=[common], help="answer a question from the web, citing URLs",
                              description="Search the web, fetch pages into a workspace as markdown "
                              "and answer QUESTION, citing the URLs read.")
    web.add_argument("question", metavar="QUESTION")
    web.add_argument("-u", "--url", dest="urls", action="append", default=[], metavar="URL",
                     help="fetch URL before the agent starts (repeatable)")

    fetch = commands.add_parser("fetch", help="print a page as the web_fetch tool sees it",
                                description="Fetch URL with the web tool's safety rules and print its "
                                "markdown, untruncated.")
    fetch.add_argument("url", metavar="URL")
    _add_shared(fetch)

    config = commands.add_parser("config", help="show or edit the configuration file",
                                 description="Read and write the configuration file.")
    config_actions = config.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("path", "print the configuration file's path"),
                       ("show", "print the effective configuration (keys masked)")):
        _add_shared(config_actions.add_parser(name, help=text, description=text))
    setter = config_actions.add_parser("set", help="set KEY to VALUE, validating first",
                                       description="Set a dotted KEY (e.g. defaults.model) to VALUE.")
    setter.add_argument("key", metavar="KEY")
    setter.add_argument("value", metavar="VALUE")
    _add_shared(setter)
    init = config_actions.add_parser("init", help="write a commented starter file",
                                     description="Write a commented starter configuration file.")
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    _add_shared(init)

    sandbox = commands.add_parser("sandbox", help="manage the Docker sandbox",
                                  description="Build, inspect and clean up the Docker sandbox.")
    sandbox_actions = sandbox.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (("build", "build the sandbox image from sandbox/Dockerfile"),
                       ("status", "say whether the engine and image are ready, and the hardening"),
                       ("prune", "remove containers left behind by killed runs")):
        _add_shared(sandbox_actions.add_parser(name, help=text, description=text))

    doctor = commands.add_parser("doctor", help="check git, ripgrep, Docker and the model's key",
                                 description="Check that everything a run needs is in place.")
    _add_shared(doctor)
    return parser


def _add_shared(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-v", "--verbose", action="store_true", help="show every step; tracebacks on errors")
    parser.add_argument("--config", dest="config_file", metavar="FILE",
                        help="configuration file (default: $RESEARCH_CONFIG or ~/.config/research/config.toml)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    interrupts.install()
    try:
        code = _dispatch(args)
    except KeyboardInterrupt:
        interrupts.ignore()  # cleanup is done: another Ctrl-C must not turn this exit into a traceback
        _say("research: interrupted")
        return _exit_now(EXIT_INTERRUPTED)
    except interrupts.Terminated:
        interrupts.ignore()
        _say("research: terminated")
        return _exit_now(EXIT_TERMINATED)
    except ResearchError as error:
        return _fail(args, error.exit_code, str(error), error)
    except Exception as error:  # a bug of ours: still one sentence unless -v
        return _fail(args, 1, f"internal error: {type(error).__name__}: {error}", error)
    return code


def _dispatch(args: argparse.Namespace) -> int:
    if args.command in ("repo", "web"):
        return _run(args)
    if args.command == "fetch":
        return _fetch(args)
    if args.command == "config":
        return _config(args)
    if args.command == "sandbox":
        return _sandbox(args)
    if args.command == "doctor":
        from sandbox.doctor import doctor_report

        return _checkup(doctor_report(_load_config(args)))
    raise UsageError(f"unknown command {args.command!r}")


def _run(args: argparse.Namespace) -> int:
    import attrs

    from dispatcher.progress import Progress
    from dispatcher.run import RunOptions, run_research
    from modes.base import RunRequest

    config = _load_config(args)
    defaults = config.defaults
    if args.max_steps is not None:
        defaults = attrs.evolve(defaults, max_steps=args.max_steps)
    if args.no_cleanup:
        defaults = attrs.evolve(defaults, cleanup=False)
    sandbox = config.sandbox
    if args.sandbox is not None:
        sandbox = attrs.evolve(sandbox, backend=args.sandbox)
    config = attrs.evolve(config, defaults=defaults, sandbox=sandbox)

    if args.command == "repo":
        request = RunRequest(mode="repo", question=_question(args.question), target=args.url,
                             ref=args.ref, full=args.full, depth=args.depth)
    else:
        request = RunRequest(mode="web", question=_question(args.question), urls=tuple(args.urls))
    progress = Progress.for_terminal(verbose=args.verbose)
    report = run_research(request, config, progress, RunOptions(model=args.model))
    usage = report.usage
    progress.detail(f"{report.steps} steps, {report.tool_calls} tool calls, {usage.prompt_tokens:,} prompt + "
                    f"{usage.completion_tokens:,} completion tokens, ${usage.cost_usd:.4f}, "
                    f"{report.elapsed_s:.1f} s, stopped: {report.stopped}")
    print(report.render(as_json=args.json))
    return EXIT_OK


def _fetch(args: argparse.Namespace) -> int:
    from modes.net.fetch import fetch_page

    page = fetch_page(args.url, _load_config(args).web)
    sys.stdout.write(page.markdown if page.markdown.endswith("\n") else page.markdown + "\n")
    return EXIT_OK


def _config(args: argparse.Namespace) -> int:
    from pathlib import Path

    from config.loader import config_path
    from config.writer import init_config, set_value, show_config

    path = Path(args.config_file) if args.config_file else config_path(os.environ)
    if args.action == "path":
        print(path)
    elif args.action == "show":
        print(show_config(_load_config(args)), end="")
    elif args.action == "set":
        set_value(path, args.key, args.value)
        _say(f"set {args.key} in {path}")
    elif args.action == "init":
        init_config(path, force=args.force)
        _say(f"wrote {path}")
    return EXIT_OK


def _sandbox(args: argparse.Namespace) -> int:
    from sandbox import docker_admin

    config = _load_config(args)
    if args.action == "build":
        print(docker_admin.build_image(config.sandbox, progress=_say))
    elif args.action == "status":
        return _checkup(docker_admin.sandbox_status(config.sandbox))
    elif args.action == "prune":
        removed = docker_admin.prune_containers(config.sandbox)
        print(f"removed {removed} container(s)")
    return EXIT_OK


def _checkup(checkup) -> int:
    """Print a checkup's lines; exit 1, naming what failed, unless a run could go ahead."""
    print(checkup.text)
    if not checkup.failed:
        return EXIT_OK
    _say(f"research: not ready: {', '.join(checkup.failed)} (each line above says what to do)")
    return EXIT_FAILURE


def _load_config(args: argparse.Namespace):
    from pathlib import Path

    from config.loader import load_config

    path = Path(args.config_file) if getattr(args, "config_file", None) else None
    return load_config(path, os.environ)


def _question(text: str) -> str:
    if not text.strip():
        raise UsageError("QUESTION is empty; ask something")
    return text


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _fail(args: argparse.Namespace, code: int, message: str, error: BaseException) -> int:
    if getattr(args, "verbose", False):
        import traceback

        traceback.print_exception(error)
    _say(f"research: {message}")
    if getattr(args, "json", False):
        import json

        print(json.dumps({"error": message, "exit_code": code}))
    return code


def _exit_now(code: int) -> int:
    # Tool threads may still be inside a subprocess call; the workspace is
    # already gone (the run's `finally` ran), so don't wait for them.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _VersionAction(argparse.Action):
    """--version, looking the version up only when asked: importlib.metadata
    costs about 40 ms, a quarter of `research --help`."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("research")
    except PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
