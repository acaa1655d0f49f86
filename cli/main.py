"""``pidquota``: the command line's entry (the console script, ``python -m pidquota`` and
spark-submit's entry script). One module per command: ``pidquota.cli.run``, ``.package``,
``.recommend``, ``.report``, ``.generate``, ``.blocks``, ``.configs``, ``.status``, ``.actuator``,
``.formats``."""

from __future__ import annotations

import argparse
import sys

from pidquota.cli import (
    actuator,
    blocks,
    clients,
    configs,
    formats,
    generate,
    logs,
    package,
    recommend,
    report,
    run,
    status,
)
from pidquota.conf.errors import PidquotaError

# Every command, in the order --help lists them; each module has add_parser(sub) and run(args).
COMMANDS = (run, package, recommend, report, generate, clients, blocks, configs, status, actuator, formats)


DESCRIPTION = """Cluster-wide producer-ID quotas for Apache Kafka (KIP-936's producer_ids_rate),
enforced by a Spark Structured Streaming job: only previously unseen PIDs count
against a user's quota, so known producers keep flowing."""
EXAMPLES_TEXT = """examples:
  pidquota run                                        the demo: generated traffic, a live table
  pidquota run --input events.jsonl --output out --once
  pidquota run --input kafka://broker:9092/produce-events --prometheus-port 9464
  pidquota configs --redis redis://localhost:6379/0 --alter --entity-type users \\
      --entity-name alice --add-config producer_ids_rate=50
  pidquota recommend --input events/ --what-if conf/quotas.json
  pidquota report out

'pidquota COMMAND --help' tells more; the README and docs/ have the whole story."""


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pidquota")
    except PackageNotFoundError:  # run from a source tree (or spark-submit's zip) without installing
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    """The command line. A flag no command knows is refused with that command's usage, not the
    top-level one (:func:`parse`)."""
    ap = argparse.ArgumentParser(
        prog="pidquota",
        description=DESCRIPTION,
        epilog=EXAMPLES_TEXT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--version", action="version", version=f"pidquota {version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub).set_defaults(handler=command.run)
    return ap


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The parsed command line. argparse leaves a subcommand's unknown flags to the top-level
    parser, whose usage says nothing of that command's flags; here the command's parser refuses
    them (``pidquota run --inptu x`` prints ``run``'s usage)."""
    ap = parser()
    args, unknown = ap.parse_known_args(argv)
    if unknown:
        commands = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with logs.to_stderr():
        try:
            return args.handler(args)
        except PidquotaError as exc:
            print(f"pidquota: error: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
