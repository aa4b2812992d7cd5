"""The Batch API: files of requests uploaded once, run on idle capacity, answered in files.

``config`` (the ``batches`` section), ``lines`` (pure: an input file's lines checked as OpenAI
checks them, output lines built), ``schema`` (tables and migrations), ``files`` (the file store),
``jobs`` (the batch and line store, leases included), ``objects`` (OpenAI's file and batch
objects), ``upload`` (the multipart body, streamed and bounded), ``api`` (the routes),
``runner`` (lines through the pipeline, in a band that yields to interactive traffic).
"""
