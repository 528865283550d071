"""The engine process: the app talks to llama.cpp only through ``EngineClient`` (see docs/process.md).

``client`` (``EngineClient``), ``generation`` (``Generation``, one streaming reply), ``errors`` (``WorkerError``
and its kinds), ``launch`` (starting the child: command line, environment, logs), ``protocol`` (framing and
request encoding), ``registry`` (``UnsafeModels``) and ``server`` (the engine process itself). Import from those
modules. Importing this package (or ``outrider.worker.client``) never imports llama_cpp.
"""
