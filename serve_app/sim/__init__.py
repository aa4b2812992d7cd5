"""A simulated vLLM OpenAI server: deterministic text on a prefill/decode timing model.

A simulator, not an engine: it stands in for Ray Serve LLM only in gateway tests and overhead
benchmarks. It never imports gateway, ray or vllm.

    app = create_sim_app(SimSettings(models=("sim-model",), no_delay=True))
    # or: python -m serve_app.sim --host 127.0.0.1 --port 0 --no-delay
    #     (prints "SIM_LISTENING http://127.0.0.1:PORT" once it accepts connections)

Endpoints: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models, /health.
For tests: GET /sim/requests (records, see ``records.py``), POST /sim/reset. Requests can be
shaped one at a time by ``x-sim-*`` headers (see ``steering.py``). The timing model is described
on :class:`SimSettings`, the prompt token estimate in ``text.py``.
"""

from serve_app.sim.app import SimApp, create_sim_app
from serve_app.sim.settings import SimSettings

__all__ = ["SimApp", "SimSettings", "create_sim_app"]
