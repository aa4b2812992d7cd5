"""serve_app: the Ray Serve LLM applications (PD and colocated) and a simulated vLLM server."""
