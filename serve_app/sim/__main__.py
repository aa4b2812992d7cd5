"""``python -m serve_app.sim``: run the simulated vLLM OpenAI server."""

from serve_app.sim.cli import main

if __name__ == "__main__":
    main()
