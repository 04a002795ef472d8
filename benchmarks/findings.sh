#!/usr/bin/env bash
# Reproduce the mq-bench paper's experiments on this machine, shrunk to fit it (run on demand,
# on a quiet machine; ~30 minutes). docs/findings.md quotes what this printed.
#
#   benchmarks/findings.sh [OUT]        # OUT defaults to results/findings
#
# Each experiment is the paper scenario in scenarios/ with shorter warm-up and duration and
# the targets this machine runs natively (HiveMQ CE and Artemis from Maven Central).
# Every command is printed before it runs; tables go to OUT/<experiment>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-results/findings}
MQ=.venv/bin/mqbench
mkdir -p "$OUT"

step() {
  local name=$1; shift
  echo "== $name: $MQ $* (load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$MQ" "$@" --out "$OUT/$name" | tee "$OUT/$name.log"
  local run_dir
  run_dir=$(find "$OUT/$name" -mindepth 2 -maxdepth 2 -type d | sort | tail -1)
  "$MQ" report "$run_dir" --format md --out "$OUT/$name.md" --figures "$OUT/$name-figures"
}

# Exp 1: latency vs payload, every target that runs here (10 pairs x 10 msg/s, QoS 0).
step exp1 run scenarios/paper-exp1-latency-vs-payload.yaml \
  --set 'targets=[mosquitto,rabbitmq-mqtt,hivemq,artemis,activemq,tbmq-style,nats,redis,zenoh]' \
  --set workload.warmup=3s --set workload.duration=12s --set workload.drain=3s

# Exp 2: throughput and broker CPU/RSS vs pairs at the 1- and 2-CPU native profiles.
step exp2 run scenarios/paper-exp2-throughput-pairs.yaml \
  --set 'targets=[mosquitto,nats,hivemq]' \
  --set 'workload.pairs=[250,1000,2000]' \
  --set 'resources=[1cpu-2g,2cpu-4g]' \
  --set workload.warmup=3s --set workload.duration=10s --set workload.drain=3s

# Exp 3: QoS 0/1/2 under subscriber connection resets, every MQTT target here.
step exp3 run scenarios/paper-exp3-qos-faults.yaml \
  --set 'targets=[mosquitto,rabbitmq-mqtt,hivemq,artemis,activemq,tbmq-style]' \
  --set workload.warmup=3s --set workload.duration=24s --set workload.drain=5s \
  --set 'faults.schedule={kind: exponential, mttf: 6s, mttr: 2s}'
