"""``pidquota report``: one self-contained HTML file from a run's output folder, and the
per-user run summary.

* :mod:`.data`: the run, its offenders table, header and summary (pandas);
* :mod:`.series`: what the plots and tables draw (pandas);
* :mod:`.plots`: the plots (matplotlib, the ``report`` extra), each a PNG;
* :mod:`.html`: the page, every plot inside it as a ``data:`` URI, so the file can be mailed
  or attached to a ticket as it is.
"""

from pidquota.observe.report.html import render, write_report
from pidquota.observe.report.plots import MissingDependencyError

__all__ = ["MissingDependencyError", "render", "write_report"]
