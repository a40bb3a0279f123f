"""Static-KV-cache LLMs: export of prefill + decode, the generation loop, both engines."""
