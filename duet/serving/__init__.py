"""duet over the network: the FastAPI server (HTTP, WebSocket streams and the page in ``web/``), its local launcher,
the streaming client, and the voice-activity turns of a hands-free conversation."""
