"""The serving config: one model served by a prefill/decode (PD) pool and a colocated pool.

One YAML file is the single source of truth for the Ray Serve apps, the Serve config rendered for
``serve deploy`` and the ``serveConfigV2`` block of a KubeRay RayService. The models are strict and
frozen: an unknown key is an error naming its path, and the checks in :mod:`serve_app.checks`
catch the mistakes that otherwise break a deployment silently (a misspelt NIXL backend key, EFA's
backend without EFA's environment, prefill and decode on different models, ...)::

    cfg = load_serving_config("examples/serving/qwen3.5-9b-g6.yaml")
    cfg.pd.decode.kv_transfer_config.kv_connector_extra_config.backends   # ("LIBFABRIC",)

Strings may name environment variables, ``${VAR}`` or ``${VAR:-default}`` (the local profile
points the model source at a folder it generates this way).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from configkit import StrictModel


class Strict(StrictModel):
    """Unknown keys are errors with a suggestion (the shared loader's rule)."""


class ModelSpec(Strict):
    id: str = Field(min_length=1)
    """The name clients ask for (``model`` in OpenAI requests); Ray Serve's ``model_id``."""
    source: str = Field(min_length=1)
    """A Hugging Face hub name (``Qwen/Qwen3.5-9B``) or a local folder with the weights."""
    tokenizer: str | None = None
    """Hub name or folder of the tokenizer, when it is not the model's own."""
    max_model_len: int = Field(gt=0)
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    local_shape: Literal["tiny", "llama-3-8b"] = "tiny"
    """Local profiles only (never rendered): what ``pd-serve local up`` writes into an absolute
    ``source`` folder that has no ``config.json`` yet, with no download (serve_app/model_shapes.py).
    ``tiny``: a random-weight model of 2 layers. ``llama-3-8b``: Llama 3 8B's shape (a
    ``config.json`` and the tiny model's tokenizer, no weights), served with
    ``engine_kwargs: {load_format: dummy}`` (vLLM's random weights, the real model's compute)."""


class Accelerator(Strict):
    kind: Literal["gpu", "cpu"] = "gpu"
    type: str | None = None
    """Ray's accelerator type for GPU replicas, for example ``L4`` on g6 instances."""
    gpus: int | None = Field(None, ge=1)
    """Every engine on one machine with this many GPUs (the local GPU profile): the replicas'
    ``gpu_fraction`` shares must pack onto them. Unset: replicas spread over nodes, one GPU each
    unless ``gpu_fraction`` says otherwise. ``pd-serve local up --gpu`` sets it from the machine."""

    @model_validator(mode="after")
    def _type_only_for_gpu(self) -> Accelerator:
        if self.kind == "cpu" and self.type is not None:
            raise ValueError("type: an accelerator type needs kind: gpu")
        if self.kind == "cpu" and self.gpus is not None:
            raise ValueError("gpus: a GPU count needs kind: gpu")
        return self


class Autoscaling(Strict):
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    target_ongoing_requests: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas: greater than max_replicas")
        return self


class Scaling(Strict):
    """Either a fixed ``replicas`` count or ``autoscaling`` bounds (one replica by default)."""

    replicas: int | None = Field(None, ge=1)
    autoscaling: Autoscaling | None = None
    max_ongoing_requests: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _one_of(self) -> Scaling:
        if self.replicas is not None and self.autoscaling is not None:
            raise ValueError("replicas: set either replicas or autoscaling, not both")
        return self


class NixlExtraConfig(Strict):
    """vLLM's ``kv_connector_extra_config`` for the NixlConnector. Strict on purpose: vLLM ignores
    unknown keys, so ``backend: [LIBFABRIC]`` silently leaves NIXL on UCX (TCP speed on EFA)."""

    backends: tuple[Literal["UCX", "LIBFABRIC"], ...] = Field(min_length=1)
    # The other keys vLLM 0.32's NIXL connector reads, all optional.
    enforce_handshake_compat: bool | None = None
    num_threads: int | None = Field(None, ge=1)
    kv_lease_duration: float | None = Field(None, gt=0)
    engine_ttl: float | None = Field(None, gt=0)
    bidirectional_kv_xfer: bool | None = None
    kv_recompute_threshold: int | None = Field(None, ge=0)
    decoder_kv_blocks_ttl: float | None = Field(None, gt=0)
    push_registration_timeout: float | None = Field(None, gt=0)


class KVTransferConfig(Strict):
    """vLLM's ``kv_transfer_config``, with vLLM's own key names."""

    kv_connector: Literal["NixlConnector", "NixlPushConnector"]
    """``NixlConnector``: decode pulls (NIXL READ). ``NixlPushConnector`` (vLLM 0.26's GPU kit):
    prefill writes into decode's blocks (NIXL WRITE), the direction UCX runs over CUDA IPC on a
    GPU without an NVLink peer; Ray Serve LLM registers no backend for it (serve_app/kv_link.py)."""
    kv_role: Literal["kv_both", "kv_producer", "kv_consumer"] = "kv_both"
    kv_buffer_device: Literal["cuda", "cpu"]
    engine_id: str | None = None
    """Ray appends the replica's side-channel host and port, so one id serves all replicas."""
    kv_connector_extra_config: NixlExtraConfig


class RequestRouter(Strict):
    """How callers pick one of a deployment's replicas (Ray Serve's ``request_router_config``).

    - ``default``: Ray Serve's power of two choices (the shorter of two random queues).
    - ``prefix_aware``: Ray Serve LLM's ``PrefixCacheAffinityRouter``: a prefix tree of the prompts
      each replica has served sends a prompt to the replica holding its longest prefix while queue
      lengths differ by at most ``imbalanced_threshold``. Pays off when requests share long
      prefixes (system prompts, RAG context, multi-turn chats) and there is more than one replica.
    - ``kv_aware``: Ray Serve LLM's ``KVAwareRouter``: scores replicas by KV-cache overlap from the
      engines' KV events; needs ai-dynamo in the image and Ray Serve LLM's direct streaming
      (``RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1`` on the Ray pods), so colocated pools only.

    The thresholds below are ``PrefixCacheAffinityRouter``'s; unset ones keep Ray's defaults.
    """

    kind: Literal["default", "prefix_aware", "kv_aware"] = "default"
    imbalanced_threshold: float | None = Field(None, ge=0)
    """Largest queue-length difference between replicas at which prefix matching still decides
    (Ray's default: no limit); above it, power of two choices balances the load."""
    match_rate_threshold: float | None = Field(None, ge=0, le=1)
    """Smallest fraction of the prompt that must match a replica's prefix tree to follow it
    (Ray's default 0.1); below it, the replica with the smallest tree gets the request."""
    do_eviction: bool | None = None
    eviction_threshold_chars: int | None = Field(None, gt=0)
    eviction_target_chars: int | None = Field(None, gt=0)
    eviction_interval_secs: int | None = Field(None, gt=0)

    PREFIX_AWARE_KEYS: ClassVar[tuple[str, ...]] = (
        "imbalanced_threshold",
        "match_rate_threshold",
        "do_eviction",
        "eviction_threshold_chars",
        "eviction_target_chars",
        "eviction_interval_secs",
    )


class Deployment(Scaling):
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """vLLM engine arguments beyond those the config names itself (``enforce_eager``, ...)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of this deployment's replicas, over the config's top-level ``env``."""
    gpu_fraction: float | None = Field(None, gt=0, le=1)
    """The share of one GPU each replica takes (a Ray placement bundle ``{GPU: f, CPU: 1}``),
    for engines sharing a GPU on one machine; unset: one whole GPU (see serve_app/gpu.py)."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """This deployment's vLLM memory share of the whole GPU, over ``model.gpu_memory_utilization``;
    at most ``gpu_fraction`` where one is set."""
    request_router: RequestRouter | None = None
    """How callers choose among this deployment's replicas (Ray Serve's default when unset)."""
    stream_batching_interval_ms: float | None = Field(None, ge=0)
    """Ray Serve LLM's ``experimental_configs.stream_batching_interval_ms``: how long a stream's
    tokens are gathered before one flush to the caller (Ray's default 50 ms when unset; 0 sends
    each token as the engine makes it). Larger values cost latency (ITL becomes 0 or the
    interval) and save the ingress CPU per token; see examples/serving/README.md."""


class PDSide(Deployment):
    kv_transfer_config: KVTransferConfig | None = None
    """Required; optional in the type only so that its absence gets a message of its own."""
    model_source: str | None = None
    """Overrides ``model.source`` for this side (a new revision rolled out side by side)."""
    side_channel_port_base: int | None = Field(None, ge=1024, le=65535)
    """NIXL's side-channel port base on this side (Ray's defaults: prefill 20000, decode 22000)."""


class PDPool(Strict):
    app_name: str = "pd"
    route_prefix: str = Field("/pd", pattern=r"^/\S*$")
    kv_link: Literal["auto", "same_host", "efa", "tcp", "host_memory"] = "auto"
    """The path the KV cache takes between prefill and decode (serve_app/kv_link.py): same_host
    (CUDA IPC), efa (LIBFABRIC), tcp (only when named; announced), host_memory (the CPU stack).
    ``auto`` chooses from the accelerator and the backends."""
    ingress: Scaling = Scaling()
    prefill: PDSide
    decode: PDSide

    removed_keys: ClassVar[Mapping[str, str]] = {
        "proxy_cls_config": "removed from Ray Serve LLM in 2.59 (the PD proxy is gone: decode "
        "calls prefill itself); configure the ingress deployment under pd.ingress instead",
    }


class ColocatedPool(Deployment):
    app_name: str = "colocated"
    route_prefix: str = Field("/colocated", pattern=r"^/\S*$")
    model_source: str | None = None


class ServeOptions(Strict):
    """Ray Serve's HTTP proxy (``http_options`` of the Serve config)."""

    http_host: str = "0.0.0.0"  # noqa: S104 - in a pod the proxy must listen beyond loopback
    http_port: int = Field(8000, ge=0, le=65535)


class ServingConfig(Strict):
    model: ModelSpec
    accelerator: Accelerator = Accelerator()
    serve: ServeOptions = ServeOptions()
    env: dict[str, str] = Field(default_factory=dict)
    """Environment of every replica (prefill, decode, colocated)."""
    pd: PDPool | None = None
    colocated: ColocatedPool | None = None


def deployments(cfg: ServingConfig) -> Iterator[tuple[str, Deployment]]:
    """Every engine deployment with its key path."""
    if cfg.pd is not None:
        yield "pd.prefill", cfg.pd.prefill
        yield "pd.decode", cfg.pd.decode
    if cfg.colocated is not None:
        yield "colocated", cfg.colocated
