"""The upstream HTTP client (aiohttp behind one small interface) and its deadlines."""
