"""``pidquota recommend``: quotas suggested from observed traffic, and what they would have throttled."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pidquota.cli import checkpoints, preflight
from pidquota.cli.common import add_config_flags, add_input_flags, load_settings
from pidquota.conf.errors import PidquotaError
from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.store.kafka import KafkaUrl


def add_parser(sub) -> argparse.ArgumentParser:
    rec = sub.add_parser(
        "recommend",
        help="suggest producer_ids_rate quotas from recorded traffic, and what-if candidate quotas",
        description="Per user: new PIDs per window W (p50, p99, max), active PIDs and a suggested "
        "producer_ids_rate; a suggested <default>; with --what-if, the throttles candidate quotas "
        "would have caused. Nothing is applied.",
    )
    rec.add_argument(
        "--input",
        metavar="PATH|URL",
        required=True,
        help="JSON-lines file or folder, or kafka://HOST[:PORT]/TOPIC (read once, as with run --once)",
    )
    rec.add_argument(
        "--headroom", default="2.0", help="suggested = max(1, ceil(p99 x headroom)); > 0 (%(default)s)"
    )
    rec.add_argument(
        "--what-if",
        metavar="SPEC|FILE",
        help="candidate quotas, e.g. 'User:alice=50,bob=20,<default>=100' (bob is User:bob), "
        "or a JSON quota file like conf/quotas.json",
    )
    rec.add_argument(
        "--default-share",
        default="0.9",
        help="the suggested <default> leaves at least this share of users unthrottled; in (0, 1] (%(default)s)",
    )
    rec.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    rec.add_argument(
        "--emit-configs",
        metavar="FILE",
        nargs="?",
        const="-",
        help="write a pidquota configs script (the <default>, and each user whose suggestion is above "
        "it) to FILE, or to stdout (the table then goes to stderr); it applies nothing by itself",
    )
    add_input_flags(rec)
    add_config_flags(rec)
    return rec


def run(args: argparse.Namespace) -> int:
    """``pidquota recommend``: every flag is checked before the input is read."""
    from pidquota.recommend import output
    from pidquota.recommend import stats as rec
    from pidquota.recommend.rules import check_headroom, check_share

    headroom = _number_flag(args.headroom, "--headroom", check_headroom)
    share = _number_flag(args.default_share, "--default-share", check_share)
    quotas = None if args.what_if is None else _what_if_quotas(args.what_if)
    script = _script_target(args)
    config = load_settings(args)
    if args.input.startswith("kafka://"):
        KafkaUrl.parse(args.input)
    else:
        preflight.check_input(checkpoints.Source.of(args.input))
    from pidquota.recommend import job as recommend_job

    stats, summary = recommend_job.compute(args.input, config, quotas)
    settings = QuotaSettings.from_config(config)
    slide_ms = rec.default_slide_ms(settings.window_ms, settings.layer_count)
    basis = rec.Basis(settings.window_ms, slide_ms, headroom)
    usage = rec.with_suggestions(stats, headroom)
    default = rec.default_suggestion(usage, headroom, share)
    what_if = None if quotas is None else rec.what_if_view(usage, summary, quotas)
    if usage.empty:
        print(f"pidquota: no idempotent producers (PID >= 0) in {args.input}", file=sys.stderr)
    shown = (
        output.to_json(usage, what_if, default, basis)
        if args.json
        else output.table(usage, what_if, default, basis)
    )
    print(shown, file=sys.stderr if script == "-" else sys.stdout)
    if script is not None:
        _emit_configs(usage, default, script)
    return 0


def _number_flag(text: str, flag: str, check) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PidquotaError(f"{flag} {text!r} is not a number") from None
    try:
        return check(value)
    except PidquotaError as exc:
        raise PidquotaError(f"{flag}: {exc}") from None


def _what_if_quotas(spec: str) -> dict[str, float]:
    """``--what-if``: a JSON quota file (a name ending in .json, or an existing file), else a spec."""
    from pidquota.recommend.rules import parse_what_if

    if spec.endswith(".json") or Path(spec).is_file():
        return dict(StaticQuotas.from_file(spec).snapshot())
    return parse_what_if(spec)


def _script_target(args: argparse.Namespace) -> str | None:
    """Where ``--emit-configs`` writes: None, "-" (stdout) or a file whose folder exists."""
    target = args.emit_configs
    if target == "-" and args.json:
        raise PidquotaError("--json and --emit-configs both write to stdout; give --emit-configs FILE")
    if target not in (None, "-"):
        path = Path(target)
        if path.is_dir() or not path.parent.is_dir():
            raise PidquotaError(f"--emit-configs {target!r}: give a file in an existing folder")
    return target


def _emit_configs(usage, default, target: str) -> None:
    """The ``pidquota configs`` script: the <default>, and each user suggested above it."""
    from pidquota.recommend.output import configs_script

    floor = 0 if default is None else default.rate
    users = {r.principal: r.suggested for r in usage.itertuples() if r.suggested > floor}
    script = configs_script(users, None if default is None else default.rate)
    if target == "-":
        print(script, end="")
        return
    try:
        Path(target).write_text(script, encoding="utf-8")
        Path(target).chmod(0o755)
    except OSError as exc:
        raise PidquotaError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"pidquota: wrote {target}; nothing applied. Review it, then run: sh {target}", file=sys.stderr)
