"""mocker: a GPU-free simulator of LLM serving engines (vLLM / SGLang / TRT-LLM style)."""
__version__ = "0.1.0"
