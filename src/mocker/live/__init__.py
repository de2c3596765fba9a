"""Live (wall-clock) layer: the request boundary, the execution context and its pure helpers.

The pure, engine-independent parts live in their own modules so they can be tested
without an event loop: ``outputs`` (stream chunk and usage values), ``replay_table``
(the response replay JSONL table) and ``shaping`` (token choice, reasoning, synthetic
logprobs, native-SGLang passthrough).
"""
