#!/usr/bin/env bash
# Gift-storm CPU per thread for two builds, alternating (A B A B ...), so that a figure holds on
# a noisy 2-core host. The node runs by hand on CPU 0, the generator on CPU 1.
#
#   loadtest/scripts/runpair.sh <build dir A> <build dir B> [pairs] [rate] [seconds]
#
# A build dir holds `chorus` and `chorus-loadtest` (e.g. a copy of target/release). Env:
# NODE_ENV: extra environment for the node (e.g. "MALLOC_CONF=tcache:false"); EXTRA: extra
# flags for `chorus-loadtest gifts`. Prints, per run, the node's CPU in ms in total and per
# thread (utime+stime from /proc/<pid>/task/*/stat, with the user/system split), the
# loadtest's summary lines, and the ledger's commit and WAL figures from the node's /metrics
# (slowest group commit, checkpoints by who ran them, the writer's own checkpoint time, WAL
# restarts).
set -euo pipefail
a=$1 b=$2 pairs=${3:-4} rate=${4:-15000} secs=${5:-6}
export CHORUS_JWT_SECRET=chorus-loadtest-secret CHORUS_ADMIN_TOKEN=chorus-loadtest-admin
tick=$(getconf CLK_TCK)
one() {
  local dir=$1 data ws admin pid
  data=$(mktemp -d)
  ws=$((62100 + RANDOM % 800)); admin=$((ws + 900))
  env ${NODE_ENV:-} taskset -c 0 "$dir/chorus" standalone --ws-addr 127.0.0.1:$ws \
    --admin-addr 127.0.0.1:$admin --data-dir "$data" --rate-per-sec 1000000 --rate-burst 1000000 \
    >"$data/node.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$admin/healthz" >/dev/null 2>&1 && break; sleep 0.1
  done
  taskset -c 1 "$dir/chorus-loadtest" gifts --url "ws://127.0.0.1:$ws/ws" --admin 127.0.0.1:$admin \
    --server-pid $pid --rooms 100 --members 10 --rate "$rate" --duration "$secs" --quiet ${EXTRA:-} \
    | grep -iE 'settled|p99|lost|frames/write|server cpu' || true
  curl -fs "http://127.0.0.1:$admin/metrics" \
    | grep -E '^chorus_ledger_(group_commit_seconds\{quantile="1"\}|checkpoints_total|checkpoint_seconds\{by="writer",quantile="1"\}|wal_restarts_total)' \
    | sed 's/^chorus_ledger_/  ledger /' || true
  local total=0 line
  for t in /proc/$pid/task/*; do
    read -r line <"$t/stat" || continue
    local name=${line#*(}; name=${name%%)*}
    local rest=${line##*) }; set -- $rest
    local ms=$(( (${12} + ${13}) * 1000 / tick ))
    total=$((total + ms))
    [ "$ms" -gt 50 ] && echo "  thread $name: $ms ms (user $((${12} * 1000 / tick)), system $((${13} * 1000 / tick)))"
  done
  echo "$dir node total: $total ms"
  kill $pid; wait $pid 2>/dev/null || true
  rm -rf "$data"
}
for i in $(seq "$pairs"); do
  echo "== pair $i"; one "$a"; one "$b"
done
