"""Synthetic repeat aggregates for report tests: a paper-sized matrix without records."""

from __future__ import annotations

from mqbench.analysis.repeats import METRICS, MeanCI, RepeatAggregate, mean_ci

TARGETS = ("mosquitto", "nats", "rabbitmq-mqtt")
PAYLOADS = (64, 1024)
PAIRS = (2, 10)


def _metrics(t: int, payload: int, pairs: int, repeats: int) -> dict[str, MeanCI]:
    """Plausible metrics of one cell; repeats differ a little, so intervals are real."""
    rs = range(repeats)
    base = (0.3 + 0.4 * t) * (1 + payload / 4096) * (1 + pairs / 20) * 1000
    offered = 100.0 * pairs
    metrics = {name: MeanCI(0, None, None, None) for name in METRICS}
    metrics["offered_rate"] = mean_ci([offered] * repeats)
    metrics["expected_rate"] = mean_ci([offered] * repeats)
    metrics["throughput_msg_s"] = mean_ci([offered * (1 - 0.001 * r) for r in rs])
    metrics["loss_pct"] = mean_ci([0.1 * r for r in rs])
    metrics["duplicates"] = mean_ci([0.0] * repeats)
    metrics["reordered"] = mean_ci([0.0] * repeats)
    quantiles = {"min": 0.5, "p50": 1.0, "p95": 2.5, "p99": 4.0, "p999": 7.0, "max": 12.0}
    for q, factor in quantiles.items():
        metrics[f"latency_{q}_us"] = mean_ci([base * (1 + 0.03 * r) * factor for r in rs])
    metrics["send_lag_p99_us"] = mean_ci([12.0 + r for r in rs])
    metrics["broker_cpu_cores_mean"] = mean_ci([0.01 * pairs * (t + 1) + 0.001 * r for r in rs])
    metrics["broker_rss_mb_max"] = mean_ci([8.5 + 30 * t + 0.1 * r for r in rs])
    metrics["broker_rss_mb_mean"] = metrics["broker_rss_mb_max"]
    metrics["generator_cpu_cores_mean"] = mean_ci([0.05 * pairs] * repeats)
    return metrics


def paper_aggs(repeats: int = 3) -> list[RepeatAggregate]:
    """3 targets x 2 payloads x 2 pairs = 12 cells, ``repeats`` repeats each, rate 100 msg/s
    per publisher; one cell saturated (†), one latency-bound (‡), one with a backlog (¶)."""
    out: list[RepeatAggregate] = []
    for t, target in enumerate(TARGETS):
        for payload in PAYLOADS:
            for pairs in PAIRS:
                i = len(out)
                cell = f"{target}-{payload}B-{pairs}pairs-100hz-qos0"
                params: dict[str, object] = {
                    "target": target,
                    "topology": "pairs",
                    "pairs": pairs,
                    "publishers": pairs,
                    "subscribers": pairs,
                    "payload_bytes": payload,
                    "rate": 100.0,
                    "qos": 0,
                }
                out.append(
                    RepeatAggregate(
                        cell,
                        i,
                        params,
                        list(range(repeats)),
                        [cell] + [f"{cell}-r{r}" for r in range(1, repeats)],
                        _metrics(t, payload, pairs, repeats),
                        any_saturated=i == 11,
                        all_valid=i != 11,
                        any_latency_bound=i == 5,
                        invalid_kinds=("generator_saturated",) if i == 11 else (),
                        any_backlog=i == 7,
                    )
                )
    return out
