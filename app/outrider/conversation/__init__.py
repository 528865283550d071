"""One conversation's flow, the same for the GUI and ``outrider ask`` (no Qt, no engine process).

``flow.ConversationFlow`` carries a chat turn from the user's message to the stored reply: send, edit and resend,
regenerate, continue, stop, and the end in every way a reply can end, with the checkpoint cadence
(``cadence.CheckpointCadence``) in between. It owns the streaming reply's text (``reply_text.ReplyText``) and
feeds its live statistics (``meter.ReplyMeter``). It talks to the history, the engine and whoever shows the
conversation only through three small interfaces (``flow.TurnStore``, ``flow.ReplyEngine``, ``flow.FlowListener``):
the GUI gives it Qt bridges and re-emits what it hears as signals (``ui/chat_controller.py``), the terminal gives it
the store itself (``direct_store.DirectStore``) and the engine's event loop (``commands/ask.py``).

What one turn writes, in which order, lives one level down in ``history/turns.py``.
"""
