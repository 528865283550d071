"""The OpenAI-compatible local server: the loaded pair over HTTP, with its speculative statistics (docs/server.md).

``scheduler.py`` (the Qt-free, asyncio-free FIFO queue of replies in front of one ``EngineClient``, shared by
``outrider serve`` and the GUI's "Serve on localhost"), ``requests.py`` (OpenAI bodies → ``TextRequest``, typed
``ApiError``), ``responses.py`` (OpenAI bodies, llama-server ``timings``), ``app.py`` (the FastAPI routes),
``runner.py`` (uvicorn on a socket bound first; loopback by default), ``local.py`` (all of it around one client).
"""
