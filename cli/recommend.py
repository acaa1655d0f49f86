"""``pidquota recommend``: quotas suggested from observed traffic, and what they would have throttled."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pidquota.cli import checkpoints, preflight
from pidquota.cli.common import add_config_flags, add_input_flags, load_settings
from pidquota.conf.errors import PidquotaError
from pidquota.quota import QuotaSettings, StaticQuotas
from pidquota.recommend.rules import DEFAULT_FLOOD_FACTOR, DEFAULT_SHORT_LIFE_S
from pidquota.store.kafka import KafkaUrl


def add_parser(sub) -> argparse.ArgumentParser:
    rec = sub.add_parser(
        "recommend",
        help="suggest producer_ids_rate quotas from recorded traffic, and what-if candidate quotas",
        description="Per user: new PIDs per window W (p50, p99, max), active PIDs, how long its PIDs "
        "live, whether it is a suspected flood, and a producer_ids_rate; a <default> from the users "
        "that are not floods; then what the suggestion (or --what-if's quotas) would have throttled, "
        "by the enforcer itself. Nothing is applied.",
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
        help="candidate quotas to what-if instead of the suggestion, e.g. 'User:alice=50,bob=20,<default>=100' "
        "(bob is User:bob), or a JSON quota file like conf/quotas.json",
    )
    rec.add_argument(
        "--no-what-if", action="store_true", help="skip the what-if (a second pass over the input)"
    )
    rec.add_argument(
        "--short-life",
        metavar="SECONDS",
        help="a PID living less is short-lived; a user most of whose PIDs are, and whose max is over "
        f"--flood-factor x the fleet median, is a suspected flood; > 0 ({DEFAULT_SHORT_LIFE_S:g}, or a "
        f"quarter of the input's span when it is under 2 x {DEFAULT_SHORT_LIFE_S:g})",
    )
    rec.add_argument(
        "--flood-factor",
        default=f"{DEFAULT_FLOOD_FACTOR:g}",
        help="how far above the fleet's median max a suspected flood is; >= 1 (%(default)s)",
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
        help="write a pidquota configs script (the <default>, each user whose own quota is above it, and "
        "each suspected flood, held at or under it) to FILE, or to stdout (the table then goes to stderr); "
        "it applies nothing by itself",
    )
    add_input_flags(rec)
    add_config_flags(rec)
    return rec


def run(args: argparse.Namespace) -> int:
    """``pidquota recommend``: every flag is checked before the input is read. Two passes:
    the statistics, then the what-if of the suggestion made from them (or of --what-if)."""
    from pidquota.recommend import job as recommend_job
    from pidquota.recommend import output

    choice = _choices(args)
    script = _script_target(args)
    config = load_settings(args)
    if args.input.startswith("kafka://"):
        KafkaUrl.parse(args.input)
    else:
        preflight.check_input(checkpoints.Source.of(args.input), config["pidquota.input.format"])
    settings = QuotaSettings.from_config(config)

    def suggestion(stats):
        return _plan(stats, choice).quotas()

    what_if_quotas = None if args.no_what_if else (choice["quotas"] or suggestion)
    stats, summary = recommend_job.compute(
        args.input, config, what_if_quotas, choice["short_life_ms"] or _fitted(choice), say=_progress
    )
    plan = _plan(stats, choice)
    basis = _basis(settings, choice)
    what_if = None
    if summary is not None:
        from pidquota.recommend.stats import what_if_view

        what_if = what_if_view(plan.usage, summary, choice["quotas"] or plan.quotas())
    if plan.usage.empty:
        print(f"pidquota: no idempotent producers (PID >= 0) in {args.input}", file=sys.stderr)
    shown = output.to_json(plan, basis, what_if) if args.json else output.table(plan, basis, what_if)
    print(shown, file=sys.stderr if script == "-" else sys.stdout)
    if script is not None:
        _emit_configs(plan, script)
    return 0


def _choices(args: argparse.Namespace) -> dict:
    """The numeric flags and --what-if's quotas, checked."""
    from pidquota.recommend.rules import check_flood_factor, check_headroom, check_share, check_short_life

    short_life = (
        None if args.short_life is None else _number_flag(args.short_life, "--short-life", check_short_life)
    )
    if args.no_what_if and args.what_if is not None:
        raise PidquotaError("--what-if and --no-what-if contradict each other; give one of them")
    return {
        "headroom": _number_flag(args.headroom, "--headroom", check_headroom),
        "share": _number_flag(args.default_share, "--default-share", check_share),
        "short_life_ms": None if short_life is None else max(1, round(short_life * 1000)),
        "flood_factor": _number_flag(args.flood_factor, "--flood-factor", check_flood_factor),
        "quotas": None if args.what_if is None else _what_if_quotas(args.what_if),
    }


def _fitted(choice: dict):
    """The short life fitted to the input's span (no --short-life), kept in ``choice`` and said."""
    from pidquota.recommend.rules import fitted_short_life_ms

    def life(span_ms: int) -> int:
        choice["short_life_ms"] = fitted = fitted_short_life_ms(span_ms)
        if fitted != DEFAULT_SHORT_LIFE_S * 1000:
            _progress(
                f"the input spans {span_ms / 1000:g} s, under 2 x {DEFAULT_SHORT_LIFE_S:g} s: PID lives are "
                f"judged against {fitted / 1000:g} s, a quarter of it (--short-life sets it)"
            )
        return fitted

    return life


def _plan(stats, choice: dict):
    from pidquota.recommend import floods
    from pidquota.recommend.stats import with_suggestions

    usage = with_suggestions(stats, choice["headroom"])
    return floods.plan(
        usage, choice["headroom"], choice["share"], choice["short_life_ms"], choice["flood_factor"]
    )


def _basis(settings: QuotaSettings, choice: dict):
    from pidquota.recommend import stats as rec

    slide_ms = rec.default_slide_ms(settings.window_ms, settings.layer_count)
    return rec.Basis(
        settings.window_ms, slide_ms, choice["headroom"], choice["short_life_ms"], choice["flood_factor"]
    )


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


def _emit_configs(plan, target: str) -> None:
    """The ``pidquota configs`` script: the <default>, each user with a quota of its own,
    and each suspected flood, named with its evidence."""
    from pidquota.recommend.output import plan_script

    script = plan_script(plan)
    if target == "-":
        print(script, end="")
        return
    try:
        Path(target).write_text(script, encoding="utf-8")
        Path(target).chmod(0o755)
    except OSError as exc:
        raise PidquotaError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"pidquota: wrote {target}; nothing applied. Review it, then run: sh {target}", file=sys.stderr)


def _progress(step: str) -> None:
    """One line per step of the job on stderr, so its half a minute or more is not silent."""
    print(f"pidquota: recommend: {step}", file=sys.stderr, flush=True)
