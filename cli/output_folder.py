"""``pidquota run --fresh``: delete OUTPUT, and a checkpoint outside it, only if they are
recognisably pidquota's (pure Python)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pidquota.cli.checkpoints import CHECKPOINT_EVIDENCE, MARKER
from pidquota.conf.errors import ConfigError, PidquotaError
from pidquota.conf.paths import is_inside, local_path
from pidquota.streaming.columns import ACTIONS, OUTPUTS
from pidquota.streaming.outputs.retention import REPORT_FILE

# The sink makes a folder per output (streaming/outputs/sink.py), even an empty one
OUTPUT_CHILDREN = frozenset({*OUTPUTS, ACTIONS, "_checkpoint"})  # ACTIONS: the actuator's rows


def fresh(output: Path, checkpoint: str) -> list[Path]:
    """``--fresh``: delete OUTPUT, and the checkpoint when it lies outside OUTPUT, once both are
    checked to be pidquota's; a missing folder is fine. Returns what was deleted."""
    ckpt = local_path(checkpoint)
    if ckpt is None:
        raise ConfigError(
            f"--fresh cannot delete the checkpoint {checkpoint}, which is not a local folder; "
            "delete it yourself, then run without --fresh"
        )
    doomed = []
    try:
        if output.exists() or output.is_symlink():
            _check_output(output, ckpt)
            doomed.append(output)
        if not is_inside(ckpt, output) and _has_content(ckpt):
            _check_checkpoint_folder(ckpt)
            doomed.append(ckpt)
    except OSError as exc:
        raise PidquotaError(f"--fresh cannot look into {exc.filename}: {exc.strerror or exc}") from None
    for path in doomed:
        try:
            shutil.rmtree(path)
        except OSError as exc:
            raise PidquotaError(f"--fresh could not delete {path}: {exc.strerror or exc}") from None
    return doomed


def _check_output(output: Path, ckpt: Path) -> None:
    """Refuse unless OUTPUT holds only pidquota's folders (and hidden temporary files)."""
    if output.is_symlink() or not output.is_dir():
        what = "a symbolic link" if output.is_symlink() else "a file"
        raise _not_output(output, f"it is {what}")
    own = set(OUTPUT_CHILDREN)
    strays = []
    if is_inside(ckpt, output) and ckpt.resolve() != output.resolve():  # --checkpoint OUTPUT/a/b
        parts = ckpt.resolve().relative_to(output.resolve()).parts
        own.add(parts[0])
        strays += _strays_on_the_way(output, parts)
    for child in sorted(output.iterdir()):
        if _hidden_file(child) or (child.name == REPORT_FILE and child.is_file() and not child.is_symlink()):
            continue
        if child.name not in own or child.is_symlink() or not child.is_dir():
            strays.append(_shown(child))
        elif child.name in OUTPUT_CHILDREN - {"_checkpoint"}:
            strays += [f"{child.name}/{_shown(c)}" for c in sorted(child.iterdir()) if not _part_file(c)]
    if strays:
        listed = ", ".join(strays[:3]) + (f" and {len(strays) - 3} more" if len(strays) > 3 else "")
        raise _not_output(output, f"it has {listed}")


def _strays_on_the_way(output: Path, parts: tuple[str, ...]) -> list[str]:
    """Folders between OUTPUT and a checkpoint inside it must hold nothing but the way on."""
    strays, folder = [], output
    for i, part in enumerate(parts[:-1]):
        folder = folder / part
        if folder.is_dir() and not folder.is_symlink():
            rel = "/".join(parts[: i + 1])
            strays += [
                f"{rel}/{_shown(c)}"
                for c in sorted(folder.iterdir())
                if c.name != parts[i + 1] and not _hidden_file(c)
            ]
    return strays


def _not_output(output: Path, why: str) -> ConfigError:
    return ConfigError(
        f"--fresh would delete {output}, which does not look like pidquota output ({why}); "
        "delete it yourself or choose another --output"
    )


def _check_checkpoint_folder(ckpt: Path) -> None:
    if ckpt.is_symlink() or not ckpt.is_dir() or not any((ckpt / e).exists() for e in CHECKPOINT_EVIDENCE):
        raise ConfigError(
            f"--fresh would delete the checkpoint {ckpt}, which does not look like a Spark checkpoint "
            f"(no metadata, offsets/ or {MARKER}); delete it yourself or choose another --checkpoint"
        )


def _hidden_file(p: Path) -> bool:
    """A temporary file pidquota itself writes (``.part-....jsonl.tmp``, ``.pidquota-source.json.tmp``),
    or one NFS leaves behind (``.nfs0001``); any other hidden file (``.env``) is somebody's."""
    temporary = p.name.endswith(".tmp") or p.name.startswith(".nfs")
    return p.name.startswith(".") and temporary and p.is_file() and not p.is_symlink()


def _part_file(p: Path) -> bool:
    """What the sink writes: ``part-<batch id>.jsonl``, ``roll-<first>-<last>.jsonl``, the
    actuator's ``run-<start>.jsonl``, and hidden temporary files."""
    named = p.name.startswith(("part-", "roll-", "run-")) and p.name.endswith(".jsonl")
    return _hidden_file(p) or (named and p.is_file() and not p.is_symlink())


def _shown(p: Path) -> str:
    return p.name + ("/" if p.is_dir() and not p.is_symlink() else "")


def _has_content(p: Path) -> bool:
    if p.is_symlink() or (p.exists() and not p.is_dir()):
        return True
    return p.is_dir() and any(p.iterdir())
