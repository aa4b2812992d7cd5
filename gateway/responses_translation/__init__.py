"""The OpenAI Responses API (``POST /v1/responses``) on upstreams that serve chat completions.

Pure translation, in both directions: ``request`` (a Responses request -> a chat request),
``stream`` (chat chunks -> Responses events), ``objects`` (a whole chat answer -> a response
object), and ``translator``, the relay's chunk translator that strings them together. A pool
whose config says ``responses: native`` gets the client's body unchanged instead.
"""
