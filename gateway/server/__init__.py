"""Serving the gateway at an internet edge: the HTTP protocol with limits, the overload cap."""
