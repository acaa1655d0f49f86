"""Start-up checks for ``pidquota run`` that need no Spark (pure Python).

``run()`` calls, in order and before Spark starts:

* :func:`check_flags`: a flag that cannot apply to this input is refused with
  the reason (``--speed`` with a file, ``--starting-offsets`` without Kafka...).
* :func:`check_input` and :func:`check_kafka`: the input is there; a Kafka input's
  starting offsets parse, its brokers answer within
  ``pidquota.kafka.connect.timeout.ms`` and its topic exists.
* ``--fresh`` (:mod:`pidquota.cli.output_folder`), then the checkpoint's own checks
  (:mod:`pidquota.cli.checkpoints`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pidquota.cli.checkpoints import Source
from pidquota.conf.errors import ConfigError
from pidquota.conf.paths import local_path


def check_flags(args, kafka_input: bool) -> None:
    """Refuse a flag that cannot apply to this input, saying why."""
    demo = args.input is None
    if demo and args.once:
        raise ConfigError("--once needs --input: the demo source never runs out")
    if args.speed is not None and not demo:
        raise ConfigError(
            "--speed paces the demo only; a file or Kafka input is read as fast as it can (drop --speed)"
        )
    if args.speed is not None and not 0 < args.speed < float("inf"):
        raise ConfigError(
            f"--speed must be > 0, got {args.speed:g}; a finite number, e.g. 60 (an hour a minute)"
        )
    if args.starting_offsets and not kafka_input:
        raise ConfigError(
            "--starting-offsets applies to a Kafka input (kafka://HOST[:PORT]/TOPIC) only; "
            f"{'the demo' if demo else 'a file input'} has no offsets to start from (drop it)"
        )


def check_quotas_flag(args, config) -> None:
    """``--quotas FILE`` cannot apply when the quotas come from Redis."""
    if args.quotas and config["pidquota.redis.url"]:
        where = (
            "--quota-store"
            if args.quota_store
            else f"pidquota.redis.url ({config.origins['pidquota.redis.url']})"
        )
        raise ConfigError(
            f"--quotas {args.quotas} cannot apply: the quotas come from Redis ({where}); give one of the two"
        )


def check_acting_quotas(args, config) -> None:
    """A run that acts on a cluster (``pidquota.actuator=on``) with no quotas of the user's own
    would throttle real users by the demo's (every user 200 new PIDs an hour): a new user who
    forgot ``--quotas`` had it act and hand a throttle over. Refused, with the fix; the demo
    itself, a dry run and quotas from Redis are not."""
    if args.input is None or not acts(config):
        return
    if config["pidquota.redis.url"] or config["pidquota.quotas.file"]:
        return
    raise ConfigError(
        f"pidquota.actuator=on with the demo's quotas ({config.quotas_path()}): it would throttle your "
        "users by quotas that are not yours. Give yours with --quotas FILE (or --quota-store "
        "redis://HOST:PORT/DB), or see what it would do with pidquota.actuator=dry-run"
    )


def check_local_checkpoint(checkpoint: str, file_input: bool) -> None:
    """A file input keeps the list of files it has read beside Spark's checkpoint, so the
    checkpoint must then be a local (or mounted) folder; a Kafka input's may be anywhere."""
    if file_input and local_path(checkpoint) is None:
        raise ConfigError(
            f"the checkpoint {checkpoint} is not a local or mounted folder, but a file input keeps the "
            "list of files it has read there; use a path or a file:// URI (on a cluster: a folder "
            "every node mounts, such as NFS)"
        )


def check_input(source: Source, fmt: str | None = None) -> None:
    """A file input that is not there, or not readable, fails now rather than inside Spark;
    with ``fmt``, so does one whose files that format cannot read (``formats/recognise.py``)."""
    if source.kind == "file":
        from pidquota.formats.recognise import check_files
        from pidquota.sources.listing import check_input as check_file
        from pidquota.sources.listing import scan

        check_file(source.shown)
        if fmt is not None:
            check_files((f.path for f in scan(source.shown).files), fmt)


def check_output_outside(input_path: str, out: Path) -> None:
    """An output folder inside the input folder (or the same) would be read as input by the
    next batch or run: its decisions taken for events. Refused, unless it sits under a hidden
    name there (``_out``, ``.out``), which the input skips."""
    source, target = Path(input_path).resolve(), Path(out).resolve()
    if not source.is_dir() or not (target == source or source in target.parents):
        return
    inside = target.relative_to(source).parts
    if inside and inside[0].startswith(("_", ".")):
        return
    raise ConfigError(
        f"the output {out} is inside the input {input_path}: the run would read its own decisions and "
        "metrics back as input; give --output a folder outside it"
    )


def check_kafka(url, config) -> None:
    """A Kafka input (``url``: a :class:`pidquota.store.kafka.KafkaUrl`): its starting offsets parse, and
    its brokers answer within ``pidquota.kafka.connect.timeout.ms`` and have the topic. Else one
    line now, rather than a stack trace from inside Spark after the full request timeout."""
    from pidquota.store.kafka import check_topic, parse_starting_offsets, security_options

    try:
        parse_starting_offsets(config["pidquota.kafka.starting.offsets"])
    except ConfigError as exc:
        raise ConfigError(f"pidquota.kafka.starting.offsets (--starting-offsets): {exc}") from None
    options = {"kafka.bootstrap.servers": url.bootstrap, **security_options(config)}
    check_topic(options, url.topic, config["pidquota.kafka.connect.timeout.ms"])


def make_plugin_topic(url, config) -> None:
    """A format whose topic is pidquota's (the registry's ``own_topic``: the plug-in's inits,
    ``formats/plugin_inits.py``): a run that reads it makes it when it is missing, and says so;
    the brokers' plug-ins publish only to a topic that exists. Before, a name that looks
    misspelled is refused (``misnamed_inits_topic``); after, who may write it is checked
    (:func:`check_inits_writers`)."""
    from pidquota.conf import formats as registry

    if not registry.entry(config["pidquota.input.format"]).own_topic or any(c in url.topic for c in ",*"):
        return
    from pidquota.actuate.journal import own_principal
    from pidquota.actuate.plugin_state import INITS_TOPIC, ensure_inits_topic, misnamed_inits_topic
    from pidquota.store.kafka import security_options

    options = {"kafka.bootstrap.servers": url.bootstrap, **security_options(config)}
    timeout = config["pidquota.kafka.connect.timeout.ms"]
    mistake = misnamed_inits_topic(options, url.topic, timeout, int(time.time() * 1000))
    if mistake is not None:
        raise ConfigError(mistake)
    own = config["pidquota.actuator.principal"] or own_principal(options)
    if ensure_inits_topic(options, url.topic, timeout, own):
        print(
            f"pidquota: made the plug-in's inits topic {url.topic!r} on {url.bootstrap}; every broker's "
            "plug-in publishes the InitProducerIds it answers there within 10 s"
            + (
                ""
                if url.topic == INITS_TOPIC
                else f" if its pidquota.plugin.inits.topic says {url.topic} (its default: {INITS_TOPIC})"
            ),
            file=sys.stderr,
        )
    check_inits_writers(options, url.topic, own, config)


def check_inits_writers(options: dict, topic: str, own: str, config) -> None:
    """At every start on the plug-in's inits topic: who besides the brokers may write it
    (``actuate/plugin_state.inits_writers``). Whoever may can have pidquota throttle any user:
    refused when the run acts, unless ``pidquota.actuator.plugin.others.may.write``; else said."""
    from pidquota.actuate.controls import ControlError, Controls
    from pidquota.actuate.plugin_state import inits_writers

    controls = Controls(options, timeout_ms=config["pidquota.kafka.connect.timeout.ms"])
    try:
        others = inits_writers(
            controls, topic, own, config["pidquota.actuator.plugin.brokers.principal"].strip()
        )
    except ControlError as exc:
        others = [f"not known ({exc}; pidquota's principal needs DESCRIBE on the cluster to read ACLs)"]
    finally:
        controls.close()
    if not others:
        return
    said = (
        f"the plug-in's inits topic {topic!r} may be written by others than the brokers: {'; '.join(others)}. "
        "Whoever writes it can have pidquota throttle any user (inits made up in its name)"
    )
    if not acts(config) or config["pidquota.actuator.plugin.others.may.write"]:
        print(f"pidquota: {said}", file=sys.stderr)
        return
    raise ConfigError(
        f"{said}: remove those ACLs (kafka-acls.sh --remove), or give the topic an ACL (any: "
        f"pidquota's READ{f' for {own}' if own else ''}; and WRITE for the brokers' principal if it is not a "
        "super user, named in pidquota.actuator.plugin.brokers.principal) so that only they write it; or set "
        "pidquota.actuator.plugin.others.may.write=true to act on it anyway"
    )


def acts(config) -> bool:
    """Whether the run changes the cluster: the actuator on, and not a shadow run (which acts
    as a dry run does, docs/enforcing.md)."""
    return config["pidquota.actuator"] == "on" and config["pidquota.mode"] != "shadow"


# the source a checkpoint belongs to ------------------------------------------------------------
