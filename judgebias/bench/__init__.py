"""How fast and in how much memory a judge runs here (``judgebias bench``): the in-process engine's modes,
an OpenAI-compatible server and vLLM timed on the same prompts, and what the machine is."""
