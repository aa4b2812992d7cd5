"""Ray Serve applications built from a serving config with Ray Serve LLM's own builders.

Importable from a Serve config's ``import_path``, so ``serve run`` / ``serve deploy`` take a
serving config file with no Python written by the user::

    serve run serve_app.builders:build_pd_app config=examples/serving/local-cpu.yaml

    # or in a Serve config file
    applications:
      - name: pd
        route_prefix: /pd
        import_path: serve_app.builders:build_pd_app
        args: {config: examples/serving/local-cpu.yaml}

The arguments come from :mod:`serve_app.render`, the same code that renders the Serve config and
the RayService block: one source of truth.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from serve_app.config import ServingConfig
from serve_app.loader import load_serving_config
from serve_app.render import colocated_serving_args, pd_serving_args

if TYPE_CHECKING:
    from ray.serve import Application


def _config_of(args: dict[str, Any]) -> ServingConfig:
    unknown = set(args) - {"config"}
    if "config" not in args or unknown:
        raise ValueError(f"args: expected exactly {{config: <serving config file>}}, got {args}")
    return load_serving_config(str(args["config"]))


def build_pd_app(args: dict[str, Any]) -> Application:
    """The prefill/decode app: OpenAI ingress -> decode (vLLM) -> prefill (vLLM), KV over NIXL."""
    from ray.serve.llm import build_pd_openai_app

    cfg = _config_of(args)
    if cfg.pd is None:
        raise ValueError(f"{args['config']}: pd: not configured")
    return build_pd_openai_app(pd_serving_args(cfg, cfg.pd))


def build_colocated_app(args: dict[str, Any]) -> Application:
    """The colocated app: OpenAI ingress -> one vLLM engine doing both prefill and decode."""
    from ray.serve.llm import build_openai_app

    cfg = _config_of(args)
    if cfg.colocated is None:
        raise ValueError(f"{args['config']}: colocated: not configured")
    return build_openai_app(colocated_serving_args(cfg, cfg.colocated))


def build_application(import_path: str, args: dict[str, Any]) -> Application:
    """Call the builder a rendered Serve config names (``module:function``) with its args."""
    module_name, _, function_name = import_path.partition(":")
    builder = getattr(importlib.import_module(module_name), function_name)
    application: Application = builder(args)
    return application
