"""What touches llama.cpp and GGUF files directly: the ctypes backend, the GGUF header reader, token text."""
