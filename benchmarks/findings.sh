#!/usr/bin/env bash
# Reproduce the mq-bench paper's experiments on this machine, shrunk to fit it, three repeats
# of every cell (run on demand, on a quiet machine; about an hour). docs/findings.md quotes
# what this printed: means over the repeats with 95 % Student-t intervals (summary_agg).
#
#   benchmarks/findings.sh [OUT]           # OUT defaults to results/findings
#   SHRINK=1 benchmarks/findings.sh OUT    # every step with 1-2 s windows and 2 repeats:
#                                          # an end-to-end check of the script, not data
#
# Each experiment is the paper scenario in scenarios/ with shorter warm-up and duration and
# the targets this machine runs natively (HiveMQ CE and Artemis from Maven Central).
# Every command is printed before it runs, with the load average; tables go to
# OUT/<experiment>.md (means ± 95 % CI) and OUT/<experiment>.csv (one number per column),
# figures to OUT/<experiment>-figures/, and the run time of each step and of the whole
# script to OUT/timing.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/findings}
MQ=.venv/bin/mqbench
mkdir -p "$OUT"

if [ "${SHRINK:-0}" = 1 ]; then
  REPEAT=2
  EXP1=(1s 2s 1s) EXP2=(1s 2s 1s) FANOUT=(1s 2s 1s) EXP3=(1s 6s 2s)
  PAIRS='[50,100]' SUBSCRIBERS='[10,50]' FAULTS='{kind: exponential, mttf: 2s, mttr: 1s}'
else
  REPEAT=3
  # warm-up, measured, drain (s): sized so the 216 cells fit in about an hour with
  # broker start/stop and the analysis. On the 2026-11-27 run (exp 1 8 s, exp 3 15 s
  # measured; 94 min on a loaded machine) a cell took 1-4 s beyond its window with
  # Mosquitto, NATS, Redis, Zenoh or the built-in broker and 6-21 s with a JVM broker or
  # RabbitMQ (median per target), so the windows are the lever left: exp 1 6 s, exp 3 12 s.
  EXP1=(2s 6s 2s) EXP2=(2s 6s 2s) FANOUT=(2s 6s 2s) EXP3=(2s 12s 3s)
  PAIRS='[250,1000,2000]' SUBSCRIBERS='[10,100,500]'
  FAULTS='{kind: exponential, mttf: 4s, mttr: 1.5s}'
fi
STARTED=$(date +%s)
: > "$OUT/timing.txt"

step() {
  local name=$1; shift
  local t0
  t0=$(date +%s)
  echo "== $name: $MQ $* --set repeat=$REPEAT (load $(cut -d' ' -f1-3 /proc/loadavg))" \
    | tee -a "$OUT/timing.txt"
  local rc=0  # a failed cell (a broker that died) still leaves the others to report
  "$MQ" "$@" --set "repeat=$REPEAT" --out "$OUT/$name" | tee "$OUT/$name.log" || rc=$?
  [ "$rc" = 0 ] || echo "   $name: mqbench run exited $rc" | tee -a "$OUT/timing.txt"
  local run_dir
  run_dir=$(find "$OUT/$name" -mindepth 2 -maxdepth 2 -type d | sort | tail -1)
  "$MQ" report "$run_dir" --format md --out "$OUT/$name.md" --figures "$OUT/$name-figures"
  "$MQ" report "$run_dir" --format csv --out "$OUT/$name.csv"
  echo "   $name: $(( $(date +%s) - t0 )) s (load after $(cut -d' ' -f1-3 /proc/loadavg))" \
    | tee -a "$OUT/timing.txt"
}

windows() {  # warm-up, duration, drain as --set overrides
  echo --set "workload.warmup=$1" --set "workload.duration=$2" --set "workload.drain=$3"
}

# Exp 1: latency vs payload, every target that runs here (10 pairs x 10 msg/s, QoS 0).
# zenoh.shared_memory stays false (the default): payloads cross the router like every broker's.
# shellcheck disable=SC2046
step exp1 run scenarios/paper-exp1-latency-vs-payload.yaml \
  --set 'targets=[mosquitto,rabbitmq-mqtt,hivemq,artemis,activemq,tbmq-style,nats,redis,zenoh]' \
  $(windows "${EXP1[@]}")

# Exp 2: throughput and broker CPU/RSS vs pairs at the 1- and 2-CPU native profiles.
# shellcheck disable=SC2046
step exp2 run scenarios/paper-exp2-throughput-pairs.yaml \
  --set 'targets=[mosquitto,nats,hivemq]' \
  --set "workload.pairs=$PAIRS" \
  --set 'resources=[1cpu-2g,2cpu-4g]' \
  $(windows "${EXP2[@]}")

# Exp 2, fanout (the paper's Fig. 7): one publisher at 100 msg/s to N subscribers.
# shellcheck disable=SC2046
step exp2-fanout run scenarios/paper-exp2-fanout.yaml \
  --set 'targets=[mosquitto,nats,redis]' \
  --set "workload.subscribers=$SUBSCRIBERS" \
  $(windows "${FANOUT[@]}")

# Exp 3: QoS 0/1/2 under subscriber connection resets, every MQTT target here.
# shellcheck disable=SC2046
step exp3 run scenarios/paper-exp3-qos-faults.yaml \
  --set 'targets=[mosquitto,rabbitmq-mqtt,hivemq,artemis,activemq,tbmq-style]' \
  $(windows "${EXP3[@]}") \
  --set "faults.schedule=$FAULTS"

echo "== all: $(( $(date +%s) - STARTED )) s" | tee -a "$OUT/timing.txt"
