"""The simulator's settings: served models, context length and the timing model's knobs."""

from __future__ import annotations

from dataclasses import dataclass

from serve_app.sim.capacity import CapacitySettings

DEFAULT_MODEL = "sim-model"


@dataclass(frozen=True, slots=True)
class SimSettings:
    """How the simulated vLLM server behaves.

    Timing model (milliseconds): time to first token is
    ``ttft_base_ms + ttft_per_token_ms * prompt_tokens`` (prefill); each further token follows
    after ``itl_ms + itl_per_concurrent_ms * (concurrent_decodes - 1)`` (decode). ``no_delay``
    skips every sleep::

        settings = SimSettings(models=("m",), no_delay=True)
        app = create_sim_app(settings)
    """

    models: tuple[str, ...] = (DEFAULT_MODEL,)
    max_model_len: int = 4096
    ttft_base_ms: float = 20.0
    ttft_per_token_ms: float = 0.1
    itl_ms: float = 10.0
    itl_per_concurrent_ms: float = 0.2
    no_delay: bool = False
    output_tokens: int = 16
    embedding_dim: int = 32
    # Bounded so that a long benchmark does not grow the simulator's memory.
    max_records: int = 10_000
    fail_rate: float = 0.0
    """This fraction of model requests is answered with ``fail_status`` (health checks pass), on
    an even deterministic schedule: request n fails when floor((n+1)*rate) > floor(n*rate)."""
    fail_status: int = 500
    capacity: CapacitySettings | None = None
    """A simulated engine with a bounded batch, a waiting queue and a prefix cache
    (``capacity.py``); None paces every request on its own (the timing model above)."""

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("the simulator needs at least one model name")
        if not 0.0 <= self.fail_rate <= 1.0 or not 400 <= self.fail_status <= 599:
            raise ValueError("fail_rate must be in [0, 1] and fail_status an error status")
        if self.max_model_len < 1 or self.output_tokens < 1 or self.max_records < 1:
            raise ValueError("max_model_len, output_tokens and max_records must be positive")
