"""``pidquota report``: one self-contained HTML file from a run's output folder."""

from __future__ import annotations

import argparse


def add_parser(sub) -> argparse.ArgumentParser:
    report = sub.add_parser(
        "report",
        help="write one self-contained HTML report (plots and tables) of a run's output folder",
        description="Read a run's output folder and write one HTML file: per-user rate against the quota, "
        "throttles and tokens over event time, the top offenders, dead letters by reason. "
        "Needs matplotlib: pip install 'pidquota[report]'.",
    )
    report.add_argument("out_dir", metavar="OUT_DIR", help="the run's output folder (its --output)")
    report.add_argument(
        "--html", metavar="FILE", help="where to write the report (default: OUT_DIR/report.html)"
    )
    return report


def run(args: argparse.Namespace) -> int:
    """``pidquota report``: the HTML report of a run's output folder, and its per-user summary."""
    from pidquota.observe import report

    path, summary = report.write_report(args.out_dir, args.html)
    print(summary)
    print(f"pidquota: wrote {path} ({path.stat().st_size // 1024} KiB)")
    return 0
