"""The speculative decoding engine over llama.cpp's low-level API. Never imports Qt."""

from outrider.engine.llama.cpp_runtime import share_cpp_runtime

# Before any engine module imports llama_cpp (the reason: engine/llama/cpp_runtime.py).
share_cpp_runtime()
