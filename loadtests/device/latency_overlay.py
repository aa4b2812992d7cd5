"""Turn issue 38's latency-predicted decision on in the gateway config `local up` wrote.

    python loadtests/device/latency_overlay.py GATEWAY_YAML

Every model's ``routing.latency.mode`` becomes ``shadow`` (its pools' models learn and predict;
the fixed threshold still decides, so ``<model>``, ``<model>-pd`` and ``<model>-colocated``
route as before), and ``<model>-predicted`` is added: the routed model's copy with ``decide``.
The objective is pd-sweep.sh's SLO for goodput (TTFT <= 1000 ms, TPOT <= 50 ms) as the standard
band's default, so the decision and the goodput count judge by the same numbers. The targets
share the pools, so whatever one target's requests teach a pool's model, the next one reads.
``/metrics`` is made public (a throwaway machine's gateway) so the sweep can read the errors.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

SLO = {"ttft_ms": 1000, "tpot_ms": 50}


def overlay(config: dict) -> dict:  # type: ignore[type-arg]
    models = config["models"]
    routed = [name for name, m in models.items() if "variants" in m]
    for model in models.values():
        model.setdefault("routing", {})["latency"] = {"mode": "shadow"}
    for name in routed:
        predicted = yaml.safe_load(yaml.safe_dump(models[name]))
        predicted["routing"]["latency"] = {"mode": "decide"}
        predicted.setdefault("upstream_model", name)
        models[f"{name}-predicted"] = predicted
    config["slo"] = {"bands": {"standard": dict(SLO)}}
    # pd-sweep reads the prediction-error metrics with curl, which has no admin key.
    config.setdefault("auth", {})["public_metrics"] = True
    return config


def main() -> None:
    path = Path(sys.argv[1])
    config = overlay(yaml.safe_load(path.read_text()))
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"latency overlay: models {', '.join(config['models'])}; slo {SLO}")


if __name__ == "__main__":
    main()
