#!/usr/bin/env bash
# The one test command (README and .ci/run both call it): install what the
# tests need, lint, run the whole suite. Non-zero on any failure, including
# pytest's exit 5 ("no tests ran").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
# Tests start their own redis-server and prometheus on free ports; install what is missing.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)  # the Redis TLS test's certificates
# Apache Kafka's broker runs from Maven Central's jars (scripts/kafka_broker.py): Java 17 and mvn.
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The broker's jars, fetched once into ~/.cache/pidquota (PIDQUOTA_KAFKA_CACHE moves it).
python3 scripts/kafka_broker.py fetch >/dev/null
python3 scripts/kafka_broker.py fetch --version 3.9.1 >/dev/null  # the log4j 1 snippet's broker (Kafka before 4.0)
python3 scripts/kafka_broker.py fetch --version 4.4.0 >/dev/null  # the newest 4.x: the broker plug-in's tests
# pidquota's broker plug-in (plugin/, a Maven module): built and its Java tests run once, before
# the workers start (tests/harness/plugin.py rebuilds it only when its sources are newer).
mvn -B -q -f plugin/pom.xml package
python3 -m ruff check .
# The compiled judge (quota/kernel.py, numba) compiled once here, side by side on the two cores:
# into its cache beside the module, which the workers and every local Spark Python worker load,
# and, from the zip the cluster tests ship, into the cache folder of that zip's content
# (quota/zip_cache.py), which their executors load instead of each compiling it.
# The sink's JSON writer (streaming/outputs/jsonl_kernel.py) with it.
python3 -c "from pidquota.quota import kernel; from pidquota.streaming.outputs import jsonl_kernel
assert kernel.available() and jsonl_kernel.compiled()" &
in_tree=$!
python3 tests/harness/zip_kernel.py >/dev/null || { wait "$in_tree" || true; exit 1; }
wait "$in_tree"
# Three workers, a test file each at a time (pytest-xdist): about 14 minutes for about 1,800 tests on
# 2 cores, where two left a fifth of the cores idle (a test waiting on a broker, a subprocess, a
# timer) and took about 15 (docs/development.md). Arguments after ours win (-n 0: one process).
python3 -m pytest -n 3 --dist loadfile --no-loadscope-reorder "$@"
