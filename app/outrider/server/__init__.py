"""The OpenAI-compatible local server: the loaded pair over HTTP, with its speculative statistics (docs/server.md).

``scheduler.py`` (the Qt-free, asyncio-free FIFO queue of replies in front of one ``EngineClient``, shared by
``outrider serve`` and the GUI's "Serve on localhost"), ``requests.py`` (OpenAI bodies → ``TextRequest``, typed
``ApiError``), ``responses.py`` (OpenAI bodies, llama-server ``timings``), ``app.py`` (the FastAPI routes),
``runner.py`` (uvicorn on a socket bound first; loopback by default), ``local.py`` (all of it around one client).
"""

# A stream sends text at most this often (the first text and the end at once): steps that arrive meanwhile go out
# together. Each write costs 0.15-0.35 ms of CPU in the server (most of it the socket send) and 0.25-0.45 ms in
# the openai client, taken from llama.cpp's threads when the cores are all busy. On a 2-core machine (13 ms a token)
# a write every 30 ms cost 0.4 ms of CPU per token more than the same reply whole (3 %), every 100 ms 0.1 ms (under
# 1 %) (docs/server.md, Overhead). 10 writes a second still reads as a stream; --stream-interval-ms 0 sends every
# engine step.
DEFAULT_STREAM_INTERVAL_S = 0.1
