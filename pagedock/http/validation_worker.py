"""The validation process's child (pagedock/http/validation_process.py):
`python -m pagedock.http.validation_worker`. It reads frames of pickled (model class, body bytes)
on stdin and answers each with a frame of the pickled verdict on stdout, until stdin closes.
Anything else written to stdout (a library's print) goes to stderr instead, so the frames stay
whole.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys

from pagedock.http.validation_process import read_frame, validate_body, write_frame


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    requests = sys.stdin.buffer
    while (frame := read_frame(requests)) is not None:
        model, body = pickle.loads(frame)
        write_frame(replies, pickle.dumps(validate_body(model, body), pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # a terminal's Ctrl-C reaches the group
        main()
