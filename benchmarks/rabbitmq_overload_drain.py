r"""Where rabbitmq-mqtt's backlog waits in an overload, second by second (run on demand).

Runs one overload cell (default: 4 pairs x 7,500 msg/s of 64 B, QoS 0, 2 s warm-up, 5 s
measured, 40 s drain) with ``mqbench run`` and samples, every half second:

* inside the node (one ``rabbitmqctl eval`` starts a sampler process in it): the bytes the
  broker has read from the publishers' sockets and written to the subscribers' (``inet``
  statistics of its ports), the memory of its channel processes (the publishers' hold the
  publishes still to be routed) and of its queue processes (the routed messages still to
  be delivered), the mailboxes of the AMQP client channels and Erlang's run queue;
* from outside: the CPU the node's threads got and the time they were runnable but waited
  for a CPU (``/proc/<pid>/task/*/schedstat``), and the load average;

and prints them next to the deliveries per second from the cell's records. It answers
docs/findings.md's question (why rabbitmq-mqtt delivers a few hundred msg/s for half a
minute of an overload, then over 10,000): deliveries crawl while the publishers' channels
still hold unrouted publishes, and speed up when those are gone.

    .venv/bin/python benchmarks/rabbitmq_overload_drain.py
    .venv/bin/python benchmarks/rabbitmq_overload_drain.py --pairs 2 --rate 10000 --drain 30
    .venv/bin/python benchmarks/rabbitmq_overload_drain.py \
        --start-args '-rabbit credit_flow_default_credit {50,25}'

Needs the Debian ``rabbitmq-server`` package (as ``mqbench run`` does). Bounded: one cell,
a time limit of warm-up + duration + drain + 240 s; the temporary folder is removed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

from mqbench.records.format import LAT_UNIT_NS, RECORD_DTYPE, SEND_OK

RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
MQBENCH_RUN = (sys.executable, "-m", "mqbench", "run")

SAMPLER = """
Out = "{out}",
spawn(fun() ->
  PI = fun(P, Item) -> case process_info(P, Item) of {{Item, V}} -> V; _ -> 0 end end,
  Kind = fun(P) -> case process_info(P, dictionary) of
      {{dictionary, D}} -> case lists:keyfind('$initial_call', 1, D) of
                             {{_, {{M, _, _}}}} -> M; _ -> other end;
      _ -> gone end end,
  Kinds = [rabbit_channel, amqp_channel, rabbit_prequeue],
  Scan = fun() -> [{{K, P}} || P <- processes(), K <- [Kind(P)], lists:member(K, Kinds)] end,
  Ready = fun R(0) -> Scan();
              R(W) -> S = Scan(),
                      case length([P || {{rabbit_channel, P}} <- S]) >= {channels} of
                        true -> S; false -> timer:sleep(200), R(W - 1) end end,
  Watched = Ready(600),
  Loop = fun L(0) -> ok;
             L(N) ->
      Ports = [{{R, S}} || Pt <- erlang:ports(),
                           erlang:port_info(Pt, name) =:= {{name, "tcp_inet"}},
                           {{ok, [{{recv_oct, R}}, {{send_oct, S}}]}}
                               <- [inet:getstat(Pt, [recv_oct, send_oct])]],
      Procs = [{{K, PI(P, message_queue_len), PI(P, memory)}} || {{K, P}} <- Watched],
      file:write_file(Out, io_lib:format("~w ~w ~w ~w~n",
          [erlang:system_time(millisecond), erlang:statistics(total_run_queue_lengths_all),
           Ports, Procs]), [append]),
      timer:sleep({interval_ms}), L(N - 1)
    end,
  Loop({count}) end).
"""
"""The in-node sampler: one line per sample (wall clock ms, run queue, ports, processes)."""


@dataclass
class NodeSample:
    """One in-node sample: totals over the publishers' and subscribers' connections."""

    t: float
    run_queue: int
    ports: list[tuple[int, int]]
    procs: list[tuple[str, int, int]]

    def memory_mb(self, kind: str) -> float:
        """Memory of the processes of one kind (``rabbit_channel``, ``rabbit_prequeue``)."""
        return sum(mem for k, _, mem in self.procs if k == kind) / 1e6

    def mailbox(self, kind: str) -> int:
        """Messages waiting in the mailboxes of the processes of one kind."""
        return sum(mq for k, mq, _ in self.procs if k == kind)


@dataclass
class Samples:
    """What the sampler thread collected: OS samples of the node and its in-node samples."""

    cpu: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(wall time, CPU s, runnable-but-waiting s, 1-minute load) of the node's threads."""
    node_pid: int | None = None
    queues: list[tuple[float, int, int]] = field(default_factory=list)
    """(wall time, largest Recv-Q of a client socket, largest Send-Q of a broker socket):
    the clients' sockets that receive are the subscribers', the broker's that send are the
    ones to the subscribers, so these say whether a subscriber lags behind its socket."""


def scenario(args: argparse.Namespace) -> str:
    """The one-cell scenario."""
    return "\n".join(
        [
            "name: rabbitmq-overload-drain",
            "targets: [rabbitmq-mqtt]",
            "runtime: native",
            "workload:",
            "  topology: pairs",
            f"  pairs: {args.pairs}",
            f"  rate: {args.rate}",
            f"  payload: {args.payload}",
            "  qos: 0",
            f"  warmup: {args.warmup}s",
            f"  duration: {args.duration}s",
            f"  drain: {args.drain}s",
            "seed: 1",
            "",
        ]
    )


def find_node(root: Path) -> psutil.Process | None:
    """The ``beam.smp`` whose work directory (``HOME``) is under ``root``: this run's node."""
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "beam.smp":
            continue
        try:
            if proc.environ().get("HOME", "").startswith(str(root)):
                return proc
        except psutil.Error:
            continue
    return None


def thread_times(pid: int) -> tuple[float, float]:
    """CPU time and time spent runnable but waiting for a CPU, over the node's threads (s)."""
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:
            continue
        run += int(fields[0])
        wait += int(fields[1])
    return run / 1e9, wait / 1e9


def listener_port(env: dict[str, str]) -> int:
    """The node's MQTT port, from the ``rabbitmq.conf`` mqbench wrote for it."""
    conf = Path(env["RABBITMQ_CONFIG_FILE"]).read_text(encoding="utf-8")
    return int(re.findall(r"mqtt\.listeners\.tcp\.1 = .*:(\d+)", conf)[0])


def socket_queues(port: int) -> tuple[int, int]:
    """Largest Recv-Q of a client socket to ``port`` and largest Send-Q of the node's
    sockets on it (``/proc/net/tcp``: ``tx_queue:rx_queue`` in hex)."""
    client_rx = broker_tx = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        tx, rx = (int(x, 16) for x in fields[4].split(":"))
        if remote == port:
            client_rx = max(client_rx, rx)
        elif local == port and fields[3] == "01":  # established
            broker_tx = max(broker_tx, tx)
    return client_rx, broker_tx


def start_node_sampler(node: psutil.Process, out: Path, args: argparse.Namespace) -> None:
    """Start the sampler process inside the node (it waits there for the clients' channels:
    ``rabbitmqctl`` itself takes seconds to start on a busy machine)."""
    env = node.environ()
    mqtt_port = listener_port(env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _listening(node, mqtt_port):
        time.sleep(0.2)
    count = int((args.warmup + args.duration + args.drain + 30) / args.interval)
    interval_ms = int(args.interval * 1000)
    code = SAMPLER.format(out=out, interval_ms=interval_ms, count=count, channels=2 * args.pairs)
    ctl_env = {
        **os.environ,
        "HOME": env["HOME"],
        "ERL_EPMD_PORT": env["ERL_EPMD_PORT"],
        "RABBITMQ_CONF_ENV_FILE": env["RABBITMQ_CONF_ENV_FILE"],
    }
    subprocess.run(
        [RABBITMQCTL, "-n", env["RABBITMQ_NODENAME"], "eval", code],
        env=ctl_env,
        capture_output=True,
        timeout=60,
        check=True,
    )


def _listening(node: psutil.Process, port: int) -> bool:
    try:
        conns = node.net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in conns)


def sample(root: Path, out: Path, args: argparse.Namespace, samples: Samples) -> None:
    """The sampler thread: find the node, start its in-node sampler, sample its threads."""
    deadline = time.monotonic() + args.limit
    node = None
    while node is None and time.monotonic() < deadline:
        node = find_node(root)
        time.sleep(0.2)
    if node is None:
        return
    samples.node_pid = node.pid
    port = listener_port(node.environ())
    threading.Thread(target=start_node_sampler, args=(node, out, args), daemon=True).start()
    while node.is_running() and time.monotonic() < deadline:
        try:
            run, wait = thread_times(node.pid)
        except OSError:
            break
        now = time.time()
        samples.cpu.append((now, run, wait, os.getloadavg()[0]))
        samples.queues.append((now, *socket_queues(port)))
        time.sleep(args.interval)


def read_node_samples(path: Path) -> list[NodeSample]:
    """The in-node sampler's lines."""
    rows: list[NodeSample] = []
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        t, rq, ports, procs = line.split(" ", 3)
        rows.append(
            NodeSample(
                t=int(t) / 1000,
                run_queue=int(rq),
                ports=[(int(r), int(s)) for r, s in re.findall(r"\{(\d+),(\d+)\}", ports)],
                procs=[
                    (k, int(q), int(m)) for k, q, m in re.findall(r"\{(\w+),(\d+),(\d+)\}", procs)
                ],
            )
        )
    return rows


def cell_records(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """Send times of the sent messages and receive times of the deliveries (wall clock, s)."""
    sends = np.concatenate([np.fromfile(f, RECORD_DTYPE) for f in root.rglob("sends-*.bin")])
    found = [np.fromfile(f, RECORD_DTYPE) for f in root.rglob("deliveries-*.bin")]
    dels = np.concatenate(found) if found else np.zeros(0, RECORD_DTYPE)
    sent = sends[(sends["sub"] & SEND_OK) != 0]["t_sent"] / 1e9
    received = (dels["t_sent"] + dels["lat"].astype(np.int64) * LAT_UNIT_NS) / 1e9
    return sent, received


def run(args: argparse.Namespace) -> None:
    """Run the cell with the samplers, then print the table."""
    with tempfile.TemporaryDirectory(prefix="mqbench-rabbit-drain-") as tmp:
        root = Path(tmp)
        (root / "cell.yaml").write_text(scenario(args), encoding="utf-8")
        samples = Samples()
        node_file = root / "node-samples.txt"
        sampler = threading.Thread(target=sample, args=(root, node_file, args, samples))
        sampler.start()
        env = dict(os.environ)
        if args.start_args:
            # read by the start script (rabbitmq-env) and put on erl's command line
            env["RABBITMQ_SERVER_START_ARGS"] = args.start_args
        subprocess.run(
            [*MQBENCH_RUN, str(root / "cell.yaml"), "--out", str(root / "results"), "--no-analyze"],
            timeout=args.limit,
            check=False,
            env=env,
        )
        sampler.join(timeout=args.limit)
        sent, received = cell_records(root / "results")
        report(sent, received, read_node_samples(node_file), samples)


def report(
    sent: np.ndarray, received: np.ndarray, node: list[NodeSample], samples: Samples
) -> None:
    """One row per second since the first send, then when the backlog moved."""
    t0 = float(sent.min())
    print(f"\nsent {len(sent):,}, delivered {len(received):,}; times in s after the first send")
    print(
        "   s    sent    recv | node cpu  waited  load | sub Recv-Q  to-sub Send-Q"
        " | runq  pub read MB  sub sent MB"
        "  pub-channels MB  queues MB  amqp_channel mailboxes"
    )
    end = int(max(float(sent.max()), float(received.max(initial=t0))) - t0) + 2
    for second in range(end):
        lo, hi = t0 + second, t0 + second + 1
        line = f"{second:4d} {_count(sent, lo, hi):7d} {_count(received, lo, hi):7d} | "
        line += _cpu_columns(samples.cpu, lo, hi) + " | " + _queue_columns(samples.queues, lo, hi)
        line += " | " + _node_columns(node, hi)
        print(line)
    _summary(received, node, samples.queues, t0)


def _count(times: np.ndarray, lo: float, hi: float) -> int:
    return int(np.count_nonzero((times >= lo) & (times < hi)))


def _cpu_columns(cpu: list[tuple[float, float, float, float]], lo: float, hi: float) -> str:
    before = [c for c in cpu if c[0] <= lo]
    within = [c for c in cpu if lo < c[0] <= hi + 0.5]
    if not before or not within:
        return " " * 22
    a, b = before[-1], within[-1]
    dt = b[0] - a[0]
    if b[1] < a[1]:  # the node's threads were gone by the second sample
        return " " * 22
    return f"{(b[1] - a[1]) / dt:8.2f} {(b[2] - a[2]) / dt:7.2f} {b[3]:5.2f}"


def _queue_columns(queues: list[tuple[float, int, int]], lo: float, hi: float) -> str:
    within = [q for q in queues if lo <= q[0] < hi]
    if not within:
        return " " * 25
    return f"{max(q[1] for q in within):10d} {max(q[2] for q in within):14d}"


def _node_columns(node: list[NodeSample], at: float) -> str:
    last = [n for n in node if n.t <= at]
    if not last:
        return ""
    n = last[-1]
    # publishers' connections read a lot and send nothing, subscribers' the other way round
    pub = sum(r for r, s in n.ports if r > s) / 1e6
    sub = sum(s for r, s in n.ports if s > r) / 1e6
    return (
        f"{n.run_queue:4d} {pub:12.1f} {sub:12.1f} {n.memory_mb('rabbit_channel'):16.1f}"
        f" {n.memory_mb('rabbit_prequeue'):10.1f} {n.mailbox('amqp_channel'):22d}"
    )


def _summary(
    received: np.ndarray, node: list[NodeSample], queues: list[tuple[float, int, int]], t0: float
) -> None:
    if not node or not queues or not len(received):
        print("no in-node samples (rabbitmqctl eval failed?) or no deliveries")
        return
    channels = [n.memory_mb("rabbit_channel") for n in node]
    peak = max(channels)
    after_peak = node[channels.index(peak) :]
    emptied = next((n.t for n in after_peak if n.memory_mb("rabbit_channel") < 0.1 * peak), None)
    per_second = np.bincount((received - t0).astype(int).clip(0))
    # the first of three seconds in a row at >= 5,000 deliveries/s (single spikes happen)
    fast = next((s for s in range(len(per_second) - 2) if min(per_second[s : s + 3]) >= 5000), None)
    slow = per_second[2 : fast if fast else len(per_second)]
    print(
        "\nlargest subscriber Recv-Q / broker Send-Q to a subscriber over the run: "
        f"{max(q[1] for q in queues)} / {max(q[2] for q in queues)} bytes"
    )
    print(
        f"publishers' channels: peak {peak:.1f} MB, below 10 % of it at "
        f"{'-' if emptied is None else f'{emptied - t0:.1f} s'}; deliveries >= 5,000/s "
        f"from second {fast} on (3 s in a row); {np.mean(slow) if len(slow) else 0:.0f} msg/s "
        "on average before that"
    )


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--rate", type=int, default=7500, help="msg/s per publisher")
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--warmup", type=float, default=2)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--drain", type=float, default=40)
    parser.add_argument("--interval", type=float, default=0.5, help="sampling interval (s)")
    parser.add_argument(
        "--start-args",
        default="",
        help="extra erl arguments for the node, e.g. "
        "'-rabbit credit_flow_default_credit {50,25}' (RABBITMQ_SERVER_START_ARGS)",
    )
    args = parser.parse_args()
    args.limit = args.warmup + args.duration + args.drain + 240
    run(args)


if __name__ == "__main__":
    main()
