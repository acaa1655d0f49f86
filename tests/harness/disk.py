"""A small disk for the full-disk fault: a tmpfs of a given size mounted on a folder (the test
machine runs as root; an unprivileged user cannot mount it, and the test fails saying so)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


class SmallDisk:
    def __init__(self, folder: Path, size: str):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            pytest.fail(f"cannot mount a tmpfs on {folder} (needs root): {done.stderr.strip()}")

    def grow(self, size: str) -> None:
        """More room, the files kept."""
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.folder)], check=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.folder)], check=False)
