"""The upstream HTTP client (HTTP/1.1 on asyncio and httptools, behind one small interface)
and its deadlines."""
