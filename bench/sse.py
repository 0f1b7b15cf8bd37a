"""Server-sent events of an OpenAI-style streaming response, for the bench scripts: yields each
`data:` event's JSON object as it arrives and stops at `[DONE]` or the end of the stream."""
import json


def sse_events(response):
    buf = b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            data = ev[6:]
            if data == b"[DONE]":
                return
            yield json.loads(data)
