"""The speculative decoding engine over llama.cpp's low-level API. Never imports Qt."""
