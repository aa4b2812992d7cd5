"""pd-gateway: an OpenAI-compatible gateway for disaggregated LLM serving.

Build the app with :func:`gateway.app.create_app`; run it with ``pd-gateway run``.
"""

__version__ = "0.1.0"
