"""A simulated vLLM OpenAI server: deterministic text on a prefill/decode timing model.

A simulator, not an engine: it stands in for Ray Serve LLM only in gateway tests and overhead
benchmarks. It never imports gateway, ray or vllm.

    app = create_sim_app(SimSettings(models=("sim-model",), no_delay=True))
    # or: python -m serve_app.sim --host 127.0.0.1 --port 0 --no-delay
"""

from serve_app.sim.app import SimApp, create_sim_app
from serve_app.sim.settings import SimSettings

__all__ = ["SimApp", "SimSettings", "create_sim_app"]
