"""What the no-delay simulator of these tests serves (shared by the fixtures and the tests)."""

MODELS = ("sim-model", "other-model")
MAX_MODEL_LEN = 256
