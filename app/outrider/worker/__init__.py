"""The engine process: the app talks to llama.cpp only through ``EngineClient`` (see docs/process.md).

Importing this package (or ``outrider.worker.client``) never imports llama_cpp.
"""
