"""The main window's views: the chat (document, streaming, Markdown), the conversation list, the statistics panel."""
