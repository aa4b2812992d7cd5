"""Counting prompt tokens offline (tiktoken or a model's own ``tokenizer.json``)."""
