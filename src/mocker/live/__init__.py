"""Live (wall-clock) layer: the request boundary, the execution context and its pure helpers.

* ``LiveEngine`` (``engine``): the compiled core paced on the wall clock; request streams,
  cancellation, buffering, data-parallel groups, KV-event sinks, metrics.
* ``MockerContext`` (``context``): preprocessed requests in, ``LLMEngineOutput`` chunk streams
  out, one terminal chunk each; ZMQ KV-event publishers and Prometheus families per engine.
* Pure, engine-independent parts, testable without an event loop: ``outputs`` (stream chunk
  and usage values), ``replay_table`` (the response replay JSONL table) and ``shaping`` (token
  choice, reasoning, synthetic logprobs, native-SGLang passthrough).

Needs the ``live`` extra (pyzmq, msgpack, prometheus_client): from the source tree,
``python -m pip install ".[live]"``.
"""
try:
    from mocker.live.engine import (CancelOnOverflow, DirectRequest, FullResponse, LiveEngine,  # noqa: F401
                                    LiveEngineError, LiveRequest, OutputSignal, Registration)
    from mocker.live.context import (EngineShutdown, InvalidArgument, MockerContext,  # noqa: F401
                                     PreprocessedRequest, RequestContext, ResponseStream)
except ModuleNotFoundError as e:     # pragma: no cover - depends on the environment
    from mocker.extras import LIVE_MODULES, missing_extra
    if e.name not in LIVE_MODULES:
        raise
    raise missing_extra("mocker.live", e) from e

__all__ = ["LiveEngine", "DirectRequest", "OutputSignal", "LiveRequest", "Registration", "CancelOnOverflow",
           "FullResponse", "LiveEngineError", "MockerContext", "PreprocessedRequest", "RequestContext",
           "ResponseStream", "EngineShutdown", "InvalidArgument"]
