"""An executor's Python that cannot import pidquota from this checkout: the cluster
tests' ``spark.pyspark.python``. A job works with it only if it ships pidquota's code.

It is this interpreter (with pyspark, pandas, pyarrow... installed) minus the
project's editable install (its import finder) and minus the checkout on sys.path.
Spark runs ``PYTHON -c CODE`` (its version) and ``PYTHON [-u] -m MODULE ARGS`` (its
workers); that is all it handles.
Run without arguments, it fails if pidquota is importable. :func:`harness.spark_cluster.no_project_python`
writes the executable that runs it.
"""

import runpy
import sys
from pathlib import Path

CHECKOUT = str(Path(__file__).resolve().parents[2])
sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
sys.path[:] = [p for p in sys.path if p not in ("", ".", CHECKOUT) and not p.startswith(CHECKOUT + "/")]
sys.path_importer_cache.clear()
for name in [m for m in sys.modules if m.startswith("__editable__")]:
    del sys.modules[name]

args = [a for a in sys.argv[1:] if a != "-u"]
if args[:1] == ["-c"] and len(args) > 1:
    sys.argv = ["-c", *args[2:]]
    exec(compile(args[1], "<string>", "exec"))
elif args[:1] == ["-m"] and len(args) > 1:
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    try:
        import pidquota.streaming  # noqa: F401
    except ModuleNotFoundError:
        sys.exit(0)
    sys.exit(f"pidquota is importable: {pidquota.streaming.__file__}")
